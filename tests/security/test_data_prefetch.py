"""Issue 19 item 1: data sets are read-only to jobs. A built-in data set's download is the worker's, before the
ranks start (trainer/data/prefetch.py via worker/launch.py `prefetch_data`, under the once-per-host lock);
the ranks then read the files in a datasets dir they cannot write (tests/security/test_sandbox.py checks
the sandbox's side). Offline: MNIST's four files are written here as tiny valid IDX files."""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path

import pytest

from trainer.data.prefetch import FETCHED_ENV, wants_download


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ({"data": {"name": "mnist", "args": {"download": True}}}, True),
        ({"data": {"name": "mnist", "args": {"download": False}}}, False),
        ({"data": {"name": "mnist", "args": {"download": "yes"}}}, False),
        ({"data": {"name": "digits"}}, False),
        ({"entrypoint": "train.py", "data": {"name": "mnist", "args": {"download": True}}}, False),  # a script's own
        ({}, False),
    ],
)
def test_which_specs_the_worker_downloads_for(spec: dict, wanted: bool) -> None:
    assert wants_download(spec) is wanted


def _idx(path: Path, dims: tuple[int, ...]) -> None:
    magic = 0x0800 + len(dims)  # unsigned bytes, len(dims) dimensions
    count = 1
    for d in dims:
        count *= d
    path.write_bytes(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + bytes(count))


def _fake_mnist(datasets: Path) -> Path:
    raw = datasets / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", 8), ("t10k", 4)):
        _idx(raw / f"{split}-images-idx3-ubyte", (n, 28, 28))
        _idx(raw / f"{split}-labels-idx1-ubyte", (n,))
    return raw


def test_the_worker_fetches_then_the_ranks_read_a_datasets_dir_they_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import Settings
    from trainer.data.datasets import build_datasets
    from trainer.run_dir import RunDir
    from trainer.spec import DataSpec
    from worker.launch import prefetch_data

    settings = Settings(data_dir=tmp_path / "data")
    datasets = settings.resolved_datasets_dir
    _fake_mnist(datasets)
    run = RunDir(settings.resolved_runs_dir / "job_1")
    run.root.mkdir(parents=True)
    spec = {"name": "fetch", "model": {"name": "mlp"}, "data": {"name": "mnist", "args": {"root": "mnist",
            "download": True}}, "max_steps": 1}  # fmt: skip
    run.spec.write_text(json.dumps(spec))
    monkeypatch.setenv("RANKZERO_DATA_DIR", str(settings.data_dir))
    beats: list[int] = []
    prefetch_data(run, run.root / "launcher.log", settings, keep_alive=lambda: beats.append(1))
    assert (datasets / "mnist" / ".rankzero-download.lock").exists()  # the worker took the once-per-host lock

    # The ranks' side: download true, the worker fetched, the folder read-only: they read, never write.
    from core.paths import dataset_env

    for name, value in dataset_env(settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(FETCHED_ENV, "1")
    for folder in [datasets, *(p for p in datasets.rglob("*") if p.is_dir())]:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        train, val = build_datasets(DataSpec.model_validate(spec["data"]), 0)
    finally:
        for folder in [datasets, *(p for p in datasets.rglob("*") if p.is_dir())]:
            folder.chmod(stat.S_IRWXU)
    assert val is not None and len(train) == 8 and len(val) == 4  # type: ignore[arg-type]
    if os.geteuid() != 0:  # root writes anywhere: the sandbox's read-only bind is what holds there
        assert not (datasets / "mnist" / "MNIST" / "processed").exists()


def test_a_failed_download_fails_the_launch_saying_why(tmp_path: Path) -> None:
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.launch import DataFetchFailed, prefetch_data

    settings = Settings(data_dir=tmp_path / "data")
    run = RunDir(settings.resolved_runs_dir / "job_1")
    run.root.mkdir(parents=True)
    run.spec.write_text("{not json")
    with pytest.raises(DataFetchFailed, match="could not download the data set"):
        prefetch_data(run, run.root / "launcher.log", settings, keep_alive=None)
