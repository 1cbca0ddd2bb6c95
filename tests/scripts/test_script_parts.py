"""Script jobs piece by piece, no torchrun: the entrypoint, the spec's refusals, the command line, the
failure read from a rank's stderr, TensorBoard files read incrementally, the missing-data message."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trainer.entrypoint import parse_entrypoint
from trainer.run_dir import RunDir
from trainer.spec import JobSpec

CODE = "sha256:" + "ab" * 32


# --- the entrypoint and the spec ----------------------------------------------------------------


def test_entrypoint_words() -> None:
    e = parse_entrypoint("train.py --epochs 3 --name 'my run'")
    assert (e.script, e.module, e.args) == ("train.py", None, ("--epochs", "3", "--name", "my run"))
    assert e.argv() == ["train.py", "--epochs", "3", "--name", "my run"]
    m = parse_entrypoint("-m pkg.train --lr 0.1")
    assert m.argv() == ["-m", "pkg.train", "--lr", "0.1"] and m.target == "-m pkg.train"
    assert parse_entrypoint("src/./train.py").script == "src/train.py"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("/etc/passwd", "absolute"),
        ("~/train.py", "absolute"),
        ("../train.py", "leaves the code bundle"),
        ("src/../../x.py", "leaves the code bundle"),
        ("train.py 'unclosed", "quotes"),
        ("--nproc-per-node 8 train.py", "give the script first"),
        ("-m", "needs a module name"),
        ("-m os.path;rm", "not a dotted Python module"),
        ("train.py\nrm -rf /", "control characters"),
        ("   ", "empty"),
        ("x.py " + "a " * 300, "words"),
    ],
)
def test_entrypoint_refusals(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_entrypoint(text)


def test_script_spec_round_trips_without_builtin_fields() -> None:
    spec = JobSpec.model_validate({"entrypoint": "train.py", "code": CODE, "nproc": 2, "checkpoint": {"keep_last": 5}})
    dumped = spec.model_dump(mode="json")
    assert "model" not in dumped and "epochs" not in dumped and dumped["checkpoint"] == {"keep_last": 5}
    assert JobSpec.model_validate(dumped).model_dump(mode="json") == dumped  # the worker validates it again
    assert spec.strategy == "script × 2" and spec.is_script
    assert "entrypoint" in JobSpec.model_json_schema()["properties"]


@pytest.fixture
def api(api_settings, auth_headers):
    from api.app import create_app

    with TestClient(create_app(api_settings()), headers=auth_headers) as c:
        yield c


def test_builtin_fields_next_to_an_entrypoint_are_refused_by_name(api) -> None:
    body = {
        "entrypoint": "train.py --epochs 3",
        "code": CODE,
        "model": {"name": "mlp"},
        "batch_size": 64,
        "epochs": 3,
        "checkpoint": {"every_steps": 10},
        "nproc": 2,  # allowed: how many ranks torchrun starts
    }
    r = api.post("/api/jobs", json=body)
    assert r.status_code == 422, r.text
    msg = " ".join(d["msg"] for d in r.json()["detail"])
    assert "model, batch_size, epochs, checkpoint.every_steps only apply to the built-in trainer" in msg
    assert "nproc" not in msg
    # Defaults the user did not set are no reason to refuse; a bundle is needed.
    r = api.post("/api/jobs", json={"entrypoint": "train.py"})
    assert r.status_code == 422 and "entrypoint needs code" in r.text
    r = api.post("/api/jobs", json={"entrypoint": "../train.py", "code": CODE})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "entrypoint"]


# --- the command line -----------------------------------------------------------------------------


def test_command_runs_the_entrypoint_words_after_torchrun_options(tmp_path: Path) -> None:
    from worker.launch_command import build_command

    run = RunDir(tmp_path / "job_1")
    cmd = build_command(run, 1, 1, 2, 29500, parse_entrypoint("train.py --epochs 3"))
    assert cmd[-3:] == ["train.py", "--epochs", "3"] and "--nproc-per-node=2" in cmd
    assert "--spec" not in cmd
    cmd = build_command(run, 1, 1, 2, 29500, parse_entrypoint("-m pkg.main -x"))
    assert cmd[-3:] == ["-m", "pkg.main", "-x"]


def test_workdir_shows_the_bundle_and_takes_the_scripts_writes(tmp_path: Path) -> None:
    from worker.script_jobs import script_workdir

    code = tmp_path / "bundle"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    run = RunDir(tmp_path / "job_1")
    work = script_workdir(run, parse_entrypoint("train.py"), code)
    assert (work / "train.py").read_text() == "print(1)\n" and (work / "pkg").is_dir()
    (work / "model.pt").write_bytes(b"x")  # the script's own file stays on the next attempt
    assert script_workdir(run, parse_entrypoint("train.py"), code) == work and (work / "model.pt").exists()
    with pytest.raises(FileNotFoundError, match="not a file in the job's code bundle"):
        script_workdir(run, parse_entrypoint("missing.py"), code)
    with pytest.raises(FileNotFoundError, match="has none"):
        script_workdir(run, parse_entrypoint("train.py"), None)


def test_job_env_names_the_run_dir_and_tensorboard_dir(api_settings, tmp_path: Path) -> None:
    from rankzero import env as job_env_names
    from worker.launch_command import job_env, rank_env

    settings = api_settings()
    run = RunDir(settings.resolved_runs_dir / "job_7")
    env = rank_env("mark", None, settings, job_env(run, {"checkpoint": {"keep_last": 2}}, 7, 3, settings))
    assert env[job_env_names.RUN_DIR] == str(run.root.resolve())
    assert env[job_env_names.TENSORBOARD_DIR] == str((run.root / "tensorboard").resolve())
    assert env[job_env_names.JOB_ID] == "7" and env[job_env_names.ATTEMPT] == "3"
    assert env[job_env_names.DATASETS_DIR] == str(settings.resolved_datasets_dir)
    assert env[job_env_names.KEEP_LAST] == "2"


# --- the failure, from the failing rank's stderr ------------------------------------------------

ROOT_CAUSE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_04:09:09
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 5965)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def _failed_run(tmp_path: Path, stderr_rank1: str) -> tuple[RunDir, Path]:
    run = RunDir(tmp_path / "job_1")
    rank_dir = run.attempt_logs(1) / "rankzero-1-1_x" / "attempt_0"
    for rank, text in ((0, "[rank0]: RuntimeError: Connection closed by peer\n"), (1, stderr_rank1)):
        (rank_dir / str(rank)).mkdir(parents=True)
        (rank_dir / str(rank) / "stderr.log").write_text(text)
    launcher = run.logs / "attempt_1.torchrun.log"
    launcher.write_text("noise\n" + ROOT_CAUSE)
    return run, launcher


def test_a_script_failure_names_the_rank_the_exit_code_and_the_traceback(tmp_path: Path) -> None:
    from worker import errors

    stderr = (
        "warming up\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 9, in <module>\n'
        "[rank1]:     raise ValueError('bad batch on rank 1')\n"
        "[rank1]: ValueError: bad batch on rank 1\n"
    )
    run, launcher = _failed_run(tmp_path, stderr)
    failure = errors.diagnose(run, 1, launcher, 1)
    assert (failure.rank, failure.exit_code) == (1, 3)
    assert failure.message == "ValueError: bad batch on rank 1"
    assert failure.traceback[0] == "Traceback (most recent call last):"
    assert failure.traceback[-1] == "ValueError: bad batch on rank 1"
    assert failure.text().startswith("rank 1 failed with exit code 3: ValueError: bad batch on rank 1")


def test_a_script_failure_without_a_traceback_shows_the_last_lines(tmp_path: Path) -> None:
    from worker import errors

    run, launcher = _failed_run(tmp_path, "loading\nout of patience, giving up\n")
    failure = errors.diagnose(run, 1, launcher, 1)
    assert (failure.rank, failure.exit_code) == (1, 3)
    assert failure.message == "exited with code 3 (no Python traceback on its stderr)"
    assert failure.traceback == ["loading", "out of patience, giving up"]


# --- TensorBoard files --------------------------------------------------------------------------


def _write_scalars(folder: Path, tag: str, steps: range) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in steps:
        writer.add_scalar(tag, step / 10, step)
    writer.add_scalar("new_style", 2.5, 0, new_style=True)
    writer.add_text("notes", "not a scalar", 0)
    writer.close()


def test_tensorboard_tail_reads_scalars_incrementally(tmp_path: Path) -> None:
    from worker.tensorboard import TensorBoardTail

    root = tmp_path / "tensorboard"
    _write_scalars(root, "train/loss", range(3))
    _write_scalars(root / "eval", "accuracy", range(2))
    tail = TensorBoardTail(root)
    got = {(e["name"], e["step"]): e for e in tail.read()}
    assert set(got) == {("train/loss", 0), ("train/loss", 1), ("train/loss", 2), ("new_style", 0),
                        ("eval/accuracy", 0), ("eval/accuracy", 1), ("eval/new_style", 0)}  # fmt: skip
    assert got[("train/loss", 2)]["value"] == pytest.approx(0.2) and got[("new_style", 0)]["value"] == 2.5
    assert all(e["type"] == "metric" for e in got.values())
    assert tail.read() == []

    # A record still being written waits for its end; then it is read once.
    (path,) = [p for p in root.glob("*tfevents*")]
    whole = path.read_bytes()
    _write_scalars(tmp_path / "more", "train/loss", range(3, 4))
    (extra,) = [p for p in (tmp_path / "more").glob("*tfevents*")]
    records = extra.read_bytes()
    first_len = struct.unpack("<Q", records[:8])[0] + 16  # skip the file-version record
    scalar = records[first_len : first_len + struct.unpack("<Q", records[first_len : first_len + 8])[0] + 16]
    path.write_bytes(whole + scalar[:10])
    assert tail.read() == []
    path.write_bytes(whole + scalar)
    assert [(e["name"], e["step"]) for e in tail.read()] == [("train/loss", 3)]
    # A fresh tail (a restarted worker) reads everything again; the Ingestor keeps nothing twice.
    assert len(TensorBoardTail(root).read()) == len(got) + 1


def test_tensorboard_corrupt_length_ends_that_file(tmp_path: Path) -> None:
    from worker.tensorboard import TensorBoardTail

    root = tmp_path / "tb"
    root.mkdir()
    (root / "events.out.tfevents.1.host").write_bytes(b"\xff" * 40)
    assert TensorBoardTail(root).read() == []


# --- data sets ----------------------------------------------------------------------------------


def test_missing_mnist_names_the_folder_and_how_to_fill_it(tmp_path: Path, monkeypatch) -> None:
    from trainer.data.confine import ROOTS_ENV
    from trainer.data.datasets import build_datasets
    from trainer.spec import DataSpec

    monkeypatch.setenv(ROOTS_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        build_datasets(DataSpec(name="mnist", args={"root": "mnist", "download": False}), seed=0)
    text = str(info.value)
    assert str(tmp_path / "mnist" / "MNIST" / "raw") in text and "train-images-idx3-ubyte" in text
    assert "data.args.download true" in text and "RANKZERO_DATASETS_DIR" in text


def test_tensorboard_points_are_written_once_and_folded_beside_events_jsonl(sqlite_url: str) -> None:
    from sqlalchemy import text
    from sqlmodel import Session

    from core import metric_rollup
    from core.db import get_engine
    from core.migrate import upgrade
    from core.tables import Job, JobStatus
    from worker.ingest import Ingestor

    upgrade(sqlite_url)
    engine = get_engine(sqlite_url)
    with Session(engine) as s:
        job = Job(name="tb", spec={}, status=JobStatus.running, attempt=1)
        s.add(job)
        s.commit()
        job_id = job.id

    def tb(steps: range) -> list[dict]:
        return [{"type": "metric", "time": 1.0, "step": i, "name": "train/loss", "value": 1 / i} for i in steps]

    def jsonl(seqs: range) -> list[dict]:
        return [{"seq": q, "time": 1.0, "type": "metric", "step": q, "name": "sdk/acc", "value": q / 10} for q in seqs]

    ingestor = Ingestor(engine, job_id)
    assert ingestor.ingest_metrics(tb(range(1, 6))) == 5
    assert ingestor.ingest(jsonl(range(1, 4))) == 3  # events.jsonl's seqs, after TensorBoard points
    assert ingestor.ingest_metrics(tb(range(1, 9))) == 3  # a file read again, plus 3 new scalars
    assert Ingestor(engine, job_id).ingest_metrics(tb(range(1, 9))) == 0  # a restarted worker
    assert ingestor.ingest(jsonl(range(4, 6))) == 2
    with Session(engine) as s:
        metric_rollup.refresh(s, job_id)
        assert metric_rollup.series_names(s, job_id) == ["sdk/acc", "train/loss"]
        counts = dict(
            s.execute(
                text("SELECT name, sum(n) FROM metric_rollups WHERE job_id = :j AND width = 16 GROUP BY name"),
                {"j": job_id},
            ).all()
        )
        latest = s.get(Job, job_id).latest_loss
    assert counts == {"sdk/acc": 5, "train/loss": 8}  # every point folded once, from either source
    assert latest == 1 / 8


def test_a_script_missing_from_the_bundle_is_refused_at_submit(api_settings, auth_headers, tmp_path: Path) -> None:
    from api.app import create_app
    from core import bundles

    settings = api_settings()
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "train.py").write_text("print('hi')\n")
    packed = bundles.pack(folder, tmp_path / "b.tar.gz")
    tmp = bundles.incoming(settings)
    tmp.write_bytes(packed.archive.read_bytes())
    bundles.store(settings, tmp, packed.sha256)
    with TestClient(create_app(settings), headers=auth_headers) as api:
        code = bundles.ref(packed.sha256)
        r = api.post("/api/jobs", json={"entrypoint": "train.py", "code": code, "device": "cpu"})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "entrypoint"] and "src/train.py" in detail["msg"]
        r = api.post("/api/jobs", json={"entrypoint": "src/train.py --x 1", "code": code, "device": "cpu"})
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["entrypoint"] == "src/train.py --x 1" and "model" not in r.json()["spec"]


def test_tensorboard_record_bigger_than_one_read_is_skipped_not_stuck(tmp_path: Path) -> None:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    from worker.tensorboard import TensorBoardTail

    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("before", 1.0, 1)
    writer.add_image("noise", torch.rand(3, 32, 32), 1)  # a record of a few kB
    writer.add_scalar("after", 2.0, 2)
    writer.close()
    tail = TensorBoardTail(tmp_path)
    names = []
    for _ in range(10):
        names += [e["name"] for e in tail.read(max_bytes=512)]
    assert names == ["before", "after"]
