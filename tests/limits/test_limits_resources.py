"""Item 2 of "Hardening": resource limits at submit, each configurable and named in the refusal."""

from __future__ import annotations

import os

import pytest

BASE = {"name": "limits", "model": {"name": "mlp"}, "data": {"name": "digits"}, "max_steps": 1, "device": "cpu"}


def _post(client, **fields):
    return client.post("/api/jobs", json={**BASE, **fields})


def _refused(response, loc: list[str], *words: str) -> str:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", *loc], detail
    for word in words:
        assert word in detail["msg"], detail["msg"]
    return detail["msg"]


def test_cpu_ranks_are_limited_to_the_cores(limits_client) -> None:
    client = limits_client(gpus="")
    cores = os.cpu_count() or 1
    _refused(_post(client, nproc=64), ["nproc"], "RANKZERO_MAX_CPU_RANKS", f"{cores:,}")
    _refused(_post(client, nproc=cores + 1, device="auto"), ["nproc"], "RANKZERO_MAX_CPU_RANKS")
    assert _post(client, nproc=min(cores, 2)).status_code == 201
    client = limits_client(gpus="", max_cpu_ranks=3)
    assert _post(client, nproc=3).status_code == 201
    _refused(_post(client, nproc=4), ["nproc"], "RANKZERO_MAX_CPU_RANKS", "3")


def test_gpu_jobs_are_not_held_to_the_cpu_limit(limits_client) -> None:
    client = limits_client(gpus="0,1,2,3", max_cpu_ranks=1)
    assert _post(client, nproc=4, device="auto").status_code == 201
    _refused(_post(client, nproc=2, device="cpu"), ["nproc"], "RANKZERO_MAX_CPU_RANKS")


def test_num_workers_is_limited(limits_client) -> None:
    client = limits_client()
    msg = _refused(_post(client, data={"name": "digits", "num_workers": 32}), ["data", "num_workers"])
    assert "RANKZERO_MAX_NUM_WORKERS" in msg and "8" in msg
    assert _post(client, data={"name": "digits", "num_workers": 8}).status_code == 201
    client = limits_client(max_num_workers=0)
    _refused(_post(client, data={"name": "digits", "num_workers": 1}), ["data", "num_workers"], "MAX_NUM_WORKERS")


def test_global_batch_is_limited(limits_client) -> None:
    client = limits_client(gpus="", max_cpu_ranks=64)
    r = _post(client, batch_size=65_536, accumulation_steps=1024, nproc=64)  # 4.3e9 samples a step
    _refused(r, ["batch_size"], "RANKZERO_MAX_GLOBAL_BATCH", "1,000,000", "global batch")
    assert _post(client, batch_size=1000, accumulation_steps=1000).status_code == 201
    client = limits_client(max_global_batch=64)
    _refused(_post(client, batch_size=65), ["batch_size"], "RANKZERO_MAX_GLOBAL_BATCH", "64")


@pytest.mark.parametrize(
    "model",
    [
        {"name": "mlp", "args": {"in_features": 64, "hidden": [30_000, 30_000, 30_000], "num_classes": 10}},  # 2.7 GB
        {"name": "mlp", "args": {"in_features": 100_000_000, "hidden": 2}},
        {"name": "resnet50", "args": {"num_classes": 1_000_000}},
        {"name": "convnet", "args": {"num_classes": 10**9}},
    ],
)
def test_model_size_is_limited(limits_client, model: dict) -> None:
    client = limits_client()
    _refused(_post(client, model=model), ["model", "args"], "RANKZERO_MAX_MODEL_PARAMS", "100,000,000")


def test_model_size_limit_matches_the_real_models(limits_client) -> None:
    client = limits_client(max_model_params=9610)  # the default mlp: 64·128+128 + 128·10+10
    assert _post(client).status_code == 201
    _refused(_post(client, model={"name": "mlp", "args": {"hidden": 129}}), ["model", "args"], "9,610")
    client = limits_client(max_model_params=11_181_642)  # resnet18, 10 classes
    assert _post(client, model={"name": "resnet18"}).status_code == 201
    _refused(_post(client, model={"name": "resnet18", "args": {"num_classes": 11}}), ["model", "args"])


def test_bad_model_sizes_are_refused_at_submit(limits_client) -> None:
    client = limits_client()
    msg = _refused(_post(client, model={"name": "mlp", "args": {"hidden": "big"}}), ["model", "args", "hidden"])
    assert "model.args.hidden" in msg


@pytest.mark.parametrize(
    "data",
    [
        {"name": "synthetic", "args": {"num_samples": 10_000_000, "num_features": 64}},
        {"name": "synthetic", "args": {"num_samples": 1000, "num_features": 1000, "num_classes": 1_000_000}},
        {"name": "fake", "args": {"num_samples": 1_000_000, "image_size": [3, 224, 224]}},
    ],
)
def test_generated_data_size_is_limited(limits_client, data: dict) -> None:
    client = limits_client()
    _refused(_post(client, data=data), ["data", "args"], "RANKZERO_MAX_DATA_ELEMENTS", "50,000,000")


def test_generated_data_limit_is_a_setting(limits_client) -> None:
    client = limits_client(max_data_elements=32_768 + 320 + 10_240)  # synthetic defaults: 1024×32 + 32×10 + 1024×10
    assert _post(client, data={"name": "synthetic"}).status_code == 201
    _refused(_post(client, data={"name": "synthetic", "args": {"num_samples": 1025}}), ["data", "args"])


def test_queue_quota(limits_client, database_url: str) -> None:
    from api import submit_policy

    client = limits_client(database_url=database_url, max_active_jobs=3)
    ids = [_post(client).json()["id"] for _ in range(3)]
    r = _post(client)
    assert r.status_code == 429, r.text
    assert "RANKZERO_MAX_ACTIVE_JOBS" in r.text and "3" in r.text
    assert int(r.headers["Retry-After"]) > 0
    assert client.post(f"/api/jobs/{ids[0]}/cancel").status_code == 202  # a finished job frees its slot
    assert _post(client).status_code == 201
    with pytest.raises(submit_policy.QuotaExceeded) as info:
        submit_policy.check_quota(client.settings)
    assert info.value.retry_after_s > 0 and isinstance(info.value, submit_policy.SpecRefused)


def test_the_limit_settings_come_from_the_environment(monkeypatch) -> None:
    from core.settings import Settings

    for name in [n for n in os.environ if n.startswith("RANKZERO_")]:  # only what the test sets counts
        monkeypatch.delenv(name)
    defaults = Settings()
    assert (defaults.max_num_workers, defaults.max_global_batch, defaults.max_active_jobs) == (8, 1_000_000, 100)
    assert (defaults.max_model_params, defaults.max_cpu_ranks) == (100_000_000, None)
    values = {"MAX_CPU_RANKS": "5", "MAX_NUM_WORKERS": "2", "MAX_GLOBAL_BATCH": "77",
              "MAX_MODEL_PARAMS": "99", "MAX_DATA_ELEMENTS": "98", "MAX_ACTIVE_JOBS": "4"}  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(f"RANKZERO_{name}", value)
    s = Settings()
    assert (s.max_cpu_ranks, s.max_num_workers, s.max_global_batch) == (5, 2, 77)
    assert (s.max_model_params, s.max_data_elements, s.max_active_jobs) == (99, 98, 4)
