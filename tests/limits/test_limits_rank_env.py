"""Item 3 of "Hardening": ranks get an allow-listed environment, never the service's secrets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rankzero import env as job_env_names
from tests.support.deadlines import deadline_in

SECRETS = {
    "RANKZERO_API_TOKEN": "secret-token-" + "s" * 40,
    "RANKZERO_DATABASE_URL": "postgresql://rankzero:db-password@127.0.0.1:5432/rankzero",
    "RANKZERO_BROKER_URL": "redis://:broker-password@127.0.0.1:6379/0",
    "RANKZERO_ALLOWED_CODE": "myorg",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "SOME_OTHER_THING": "not-for-ranks",
}
KEPT = {"LC_ALL": "C.UTF-8", "NCCL_DEBUG": "WARN", "PYTHONHASHSEED": "0", "TORCH_SHOW_CPP_STACKTRACES": "1"}


@pytest.fixture
def worker_env(monkeypatch) -> None:
    from core.settings import get_settings

    for name, value in {**SECRETS, **KEPT}.items():
        monkeypatch.setenv(name, value)
    # The launcher's test hook: the ranks run the probe instead of the trainer.
    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "limits_env_probe")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _run_probe(tmp_path: Path, nproc: int) -> list[dict[str, str]]:
    from trainer.run_dir import RunDir
    from worker.launch import launch

    run = RunDir(tmp_path / "runs" / "job_1")
    launched = launch(run, {"name": "probe"}, 1, 1, nproc, None)  # the call worker/supervise.py makes
    try:
        assert launched.proc.wait(timeout=120) == 0, launched.launcher_log.read_text()
    finally:
        if launched.proc.poll() is None:
            launched.proc.kill()
    deadline = deadline_in(10)
    files = [run.root / f"env_rank_{r}.json" for r in range(nproc)]
    while not all(f.exists() for f in files) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [json.loads(f.read_text()) for f in files]


def test_ranks_never_see_the_token_or_the_database_and_broker_urls(worker_env, tmp_path: Path) -> None:
    envs = _run_probe(tmp_path, nproc=2)
    for rank, env in enumerate(envs):
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"  # torchrun's variables arrive
        for name, value in SECRETS.items():
            assert name not in env, f"rank {rank} got {name}"
            assert value not in json.dumps(env), f"rank {rank} got the value of {name}"
        for name, value in KEPT.items():
            assert env.get(name) == value, name
        assert env["RANKZERO_JOB_MARK"].startswith("1-1-")
        assert "PATH" in env and env["PYTHONUNBUFFERED"] == "1"
        assert not [k for k in env if k.startswith("RANKZERO_") and k not in ALLOWED_RANKZERO], env


def test_the_real_trainer_ranks_see_no_secrets(worker_env, monkeypatch, tmp_path: Path) -> None:
    from trainer.run_dir import RunDir
    from worker.launch import launch

    monkeypatch.delenv("RANKZERO_TRAINER_MODULE")  # the real trainer; the model factory records the env
    run = RunDir(tmp_path / "runs" / "job_2")
    run.root.mkdir(parents=True)
    out = run.root  # the job's own run dir: the one place its code may write (worker/sandbox.py)
    spec = {
        "name": "env", "model": {"name": "limits_env_model:make_model", "args": {"out": str(out)}},
        "data": {"name": "synthetic", "args": {"num_samples": 64, "num_features": 8, "num_classes": 3}},
        "batch_size": 8, "nproc": 2, "device": "cpu", "max_steps": 2, "checkpoint": {"every_epochs": None},
    }  # fmt: skip
    launched = launch(run, spec, 2, 1, 2, None)
    try:
        assert launched.proc.wait(timeout=240) == 0, launched.launcher_log.read_text()
    finally:
        if launched.proc.poll() is None:
            launched.proc.kill()
    for rank in (0, 1):
        env = json.loads((out / f"model_env_rank_{rank}.json").read_text())
        assert env["RANK"] == str(rank)
        leaked = [name for name, value in SECRETS.items() if name in env or value in json.dumps(env)]
        assert not leaked, f"rank {rank} got {leaked}"


ALLOWED_RANKZERO = {
    "RANKZERO_JOB_MARK",
    "RANKZERO_TRAINER_DATA_ROOTS",
    "RANKZERO_TRAINER_PROTECTED_DIRS",
    "RANKZERO_RUNS_DIR",
    "RANKZERO_TEST_RUN",
    *job_env_names.NAMES,  # what a rank is told about its job (run dir, id, attempt, datasets, TensorBoard)
}


def test_rank_env_takes_extra_names_from_settings(monkeypatch, limits_settings) -> None:
    from worker.launch_command import rank_env

    monkeypatch.setenv("RANKZERO_API_TOKEN", SECRETS["RANKZERO_API_TOKEN"])
    monkeypatch.setenv("WANDB_API_KEY", "the-user-wants-this")
    monkeypatch.setenv("HF_HOME", "/somewhere")
    assert "WANDB_API_KEY" not in rank_env("m", None, limits_settings())
    env = rank_env("m", "0", limits_settings(rank_env="WANDB_API_KEY, HF_HOME"))
    assert env["WANDB_API_KEY"] == "the-user-wants-this" and env["HF_HOME"] == "/somewhere"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "RANKZERO_API_TOKEN" not in env
