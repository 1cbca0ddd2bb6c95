"""Item 1 of "Hardening": every folder a spec names is confined to the datasets dir(s) at submit,
and again in the trainer before it touches the filesystem."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BASE = {"name": "paths", "model": {"name": "mlp"}, "max_steps": 1, "device": "cpu"}


def _post(client, data: dict):
    return client.post("/api/jobs", json={**BASE, "data": data})


def _refused(response, *loc: str) -> str:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", *loc], detail
    return detail["msg"]


def _escapes(settings) -> dict[str, str]:
    data, runs = settings.data_dir.resolve(), settings.resolved_runs_dir
    return {
        "elsewhere": str(data.parent / "anywhere"),
        "dotdot": "../../escaped",
        "filesystem-root": "/",
        "drain-flag": str(data / "drain" / str(os.getpid())),
        "data-dir": str(data),
        "another-jobs-run-dir": str(runs / "job_1"),
        "runs-dir": str(runs),
        "database": str(data / "rankzero.db"),
        "datasets-parent": str(settings.resolved_datasets_dir.parent),
    }


@pytest.mark.parametrize(
    "case",
    ["elsewhere", "dotdot", "filesystem-root", "drain-flag", "data-dir", "another-jobs-run-dir", "runs-dir",
     "database", "datasets-parent"],
)  # fmt: skip
def test_download_root_outside_the_datasets_dir_is_refused(limits_client, case: str) -> None:
    client = limits_client()
    raw = _escapes(client.settings)[case]
    response = _post(client, {"name": "mnist", "args": {"root": raw, "download": True}})
    msg = _refused(response, "data", "args", "root")
    assert "data.args.root" in msg
    assert str(client.settings.resolved_datasets_dir) in msg  # the allowed folders are named
    if case in ("elsewhere", "drain-flag", "another-jobs-run-dir"):
        assert not Path(raw).exists()
    assert client.get("/api/jobs").json()["total"] == 0


@pytest.mark.parametrize("raw", ["/", "/etc", "..", "../runs"])
def test_image_folder_outside_the_datasets_dir_is_refused(limits_client, raw: str) -> None:
    client = limits_client()
    msg = _refused(_post(client, {"name": "image_folder", "args": {"path": raw}}), "data", "args", "path")
    assert "data.args.path" in msg and str(client.settings.resolved_datasets_dir) in msg


def test_image_folder_needs_a_path(limits_client) -> None:
    client = limits_client()
    msg = _refused(_post(client, {"name": "image_folder", "args": {}}), "data", "args", "path")
    assert "data.args.path" in msg


def test_a_symlink_out_of_the_datasets_dir_is_refused(limits_client) -> None:
    client = limits_client()
    datasets = client.settings.resolved_datasets_dir
    datasets.mkdir(parents=True, exist_ok=True)
    (datasets / "sneaky").symlink_to(client.settings.resolved_runs_dir)
    _refused(_post(client, {"name": "image_folder", "args": {"path": "sneaky"}}), "data", "args", "path")


def test_relative_and_missing_roots_resolve_under_the_datasets_dir(limits_client) -> None:
    client = limits_client()
    datasets = client.settings.resolved_datasets_dir
    r = _post(client, {"name": "cifar10", "args": {"root": "cifar", "download": True}})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["data"]["args"]["root"] == str(datasets / "cifar")
    r = _post(client, {"name": "mnist", "args": {}})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["data"]["args"]["root"] == str(datasets)
    r = _post(client, {"name": "image_folder", "args": {"path": str(datasets / "pets")}})
    assert r.status_code == 201, r.text


def test_extra_dataset_roots_and_datasets_dir_settings(limits_client, tmp_path: Path) -> None:
    shared, other = tmp_path / "shared", tmp_path / "other"
    client = limits_client(datasets_dir=tmp_path / "ds", dataset_roots=f"{shared},{tmp_path / 'more'}")
    assert client.settings.dataset_root_dirs == [(tmp_path / "ds").resolve(), shared.resolve(), (tmp_path / "more")]
    assert _post(client, {"name": "image_folder", "args": {"path": str(shared / "pets")}}).status_code == 201
    assert _post(client, {"name": "mnist", "args": {"root": "m"}}).json()["spec"]["data"]["args"]["root"] == str(
        (tmp_path / "ds" / "m").resolve()
    )
    msg = _refused(_post(client, {"name": "image_folder", "args": {"path": str(other)}}), "data", "args", "path")
    assert str(shared.resolve()) in msg


def test_dataset_settings_come_from_the_environment(monkeypatch, tmp_path: Path) -> None:
    from core.settings import Settings

    for name in [n for n in os.environ if n.startswith("RANKZERO_")]:  # only what the test sets counts
        monkeypatch.delenv(name)
    monkeypatch.setenv("RANKZERO_DATA_DIR", str(tmp_path / "data"))
    assert Settings().dataset_root_dirs == [(tmp_path / "data" / "datasets").resolve()]
    monkeypatch.setenv("RANKZERO_DATASETS_DIR", str(tmp_path / "ds"))
    monkeypatch.setenv("RANKZERO_DATASET_ROOTS", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert Settings().dataset_root_dirs == [(tmp_path / p).resolve() for p in ("ds", "a", "b")]


# --- the trainer checks again, before it touches the filesystem ------------------------------------


def _tiny_image_folder(root: Path) -> Path:
    from PIL import Image

    (root / "cls").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(root / "cls" / "a.png")
    return root


@pytest.fixture
def trainer_rules(monkeypatch, tmp_path: Path) -> Path:
    """The environment the worker gives ranks: datasets dir tmp_path/ds; data and runs dirs protected."""
    from trainer.data import confine

    allowed = tmp_path / "ds"
    allowed.mkdir()
    for name, value in confine.env_rules([allowed], [tmp_path / "data", tmp_path / "runs"]).items():
        monkeypatch.setenv(name, value)
    return allowed


def test_trainer_refuses_an_image_folder_outside_the_allowed_roots(trainer_rules: Path, tmp_path: Path) -> None:
    from trainer.data.datasets import build_datasets
    from trainer.spec import DataSpec

    outside = _tiny_image_folder(tmp_path / "outside")
    with pytest.raises(ValueError, match="outside the allowed data set folders") as info:
        build_datasets(DataSpec(name="image_folder", args={"path": str(outside)}), seed=0)
    assert "cls" not in str(info.value)  # nothing of the folder was listed into the error
    inside = _tiny_image_folder(trainer_rules / "pets")
    train, val = build_datasets(DataSpec(name="image_folder", args={"path": str(inside)}, val_fraction=0.0), seed=0)
    assert len(train) == 1 and val is None


def test_trainer_refuses_a_download_root_before_creating_it(trainer_rules: Path, tmp_path: Path) -> None:
    from trainer.data.datasets import build_datasets
    from trainer.spec import DataSpec

    for target in (tmp_path / "elsewhere", tmp_path / "data" / "drain" / "1", tmp_path / "runs" / "job_2"):
        with pytest.raises(ValueError, match="data.args.root"):
            build_datasets(DataSpec(name="mnist", args={"root": str(target), "download": False}), seed=0)
        assert not target.exists()


def test_worker_hands_the_rules_to_the_ranks(limits_settings) -> None:
    from trainer.data import confine
    from worker.launch_command import rank_env

    settings = limits_settings()
    env = rank_env("mark", None, settings)
    assert env[confine.ROOTS_ENV] == str(settings.resolved_datasets_dir)
    assert env[confine.PROTECTED_ENV].split(os.pathsep) == [
        str(settings.data_dir.resolve()),
        str(settings.resolved_runs_dir),
    ]


def test_a_symlink_loop_is_refused_not_a_server_error(limits_client) -> None:
    client = limits_client()
    datasets = client.settings.resolved_datasets_dir
    datasets.mkdir(parents=True, exist_ok=True)
    (datasets / "loop").symlink_to(datasets / "loop")
    msg = _refused(_post(client, {"name": "image_folder", "args": {"path": "loop/x"}}), "data", "args", "path")
    assert "cannot be resolved" in msg
