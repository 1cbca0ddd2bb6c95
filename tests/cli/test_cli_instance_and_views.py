"""The CLI against a live `rankzero api` on a non-default port and data dir (rows seeded, no training):
it finds that instance from its environment and never writes a token; what a job says prints
verbatim (brackets are not rich markup); show / jobs / metrics / logs / checkpoints / follow / resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from core.db import get_engine
from core.tables import Job
from tests.support.commands import RANKZERO, ROOT
from tests.support.deadlines import deadline_in, seconds
from tests.support.ports import free_port
from tests.support.rows import seed_checkpoint, seed_curves, seed_job

ERROR = (
    "Traceback (most recent call last):\n"
    '  File "trainer/models.py", line 41, in build\n'
    "    return BUILDERS[spec.name](**spec.args)\n"
    "KeyError: '[bold]x[/bold]' :smile: [red]not red[/red]"
)
LOG = "step 10 loss [0.5] BUILDERS[spec.name] [bold]x[/bold] :smile:\n"


@dataclass
class Instance:
    data_dir: Path
    port: int
    proc: subprocess.Popen

    @property
    def env(self) -> dict[str, str]:
        """The environment of a user whose shell describes this instance (and nothing from the test's own)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
        return base | {"RANKZERO_DATA_DIR": str(self.data_dir), "RANKZERO_PORT": str(self.port)}

    def cli(self, *args: str, env: dict[str, str] | None = None, columns: int = 200) -> subprocess.CompletedProcess:
        e = (env if env is not None else self.env) | {"COLUMNS": str(columns), "TZ": "Asia/Tokyo"}
        return subprocess.run([RANKZERO, *args], capture_output=True, text=True, env=e, cwd=ROOT, timeout=90)


def _start(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    log = open(data_dir.parent / f"{data_dir.name}.log", "ab")  # noqa: SIM115 (the process writes it)
    return subprocess.Popen([RANKZERO, "api", *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT, start_new_session=True)  # fmt: skip


def _wait_healthy(port: int, proc: subprocess.Popen) -> None:
    deadline = deadline_in(90)
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "rankzero api did not come up"
        time.sleep(0.3)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    data_dir = tmp_path_factory.mktemp("rz-cli") / "data"
    data_dir.mkdir()
    port = free_port()
    inst = Instance(data_dir, port, None)  # type: ignore[arg-type]
    inst.proc = _start(data_dir, inst.env | {"RANKZERO_GPUS": ""})  # no RANKZERO_API_TOKEN: `api` writes one
    try:
        _wait_healthy(port, inst.proc)
        yield inst
    finally:
        _stop(inst.proc)


@pytest.fixture(scope="module")
def seeded(instance: Instance) -> dict[str, int]:
    runs = instance.data_dir / "runs"
    with Session(get_engine(f"sqlite:///{instance.data_dir / 'rankzero.db'}")) as db:
        failed = seed_job(db, "broken", "failed", runs_dir=runs, total_steps=500, step=120, error=ERROR,
                          failed_rank=1, exit_code=1)  # fmt: skip
        done = seed_job(db, "done", "succeeded", runs_dir=runs, total_steps=200,
                        spec={"batch_size": 16, "checkpoint": {"every_steps": 100}})  # fmt: skip
        for job in (failed, done):  # where the service puts a run: <runs>/job_<id>
            row = db.get(Job, job.id)
            row.run_dir = str(runs / f"job_{job.id}")
            db.add(row)
        db.commit()
        db.refresh(failed)
        db.refresh(done)
        seed_curves(db, done, 200)
        seed_checkpoint(db, done, 100)
        seed_checkpoint(db, done, 200)
        logs = Path(failed.run_dir) / "logs" / "attempt_1" / "run_0" / "attempt_0" / "0"
        logs.mkdir(parents=True)
        (logs / "stderr.log").write_text(LOG)
        (logs / "stdout.log").write_text("")
        return {"failed": failed.id, "done": done.id}


def test_the_cli_finds_the_instance_its_environment_describes_and_never_writes_a_token(instance, tmp_path) -> None:
    token_file = instance.data_dir / "api_token"
    before = token_file.read_text()
    r = instance.cli("jobs")
    assert r.returncode == 0, r.stderr
    assert token_file.read_text() == before

    # Another data dir (no server, no token): said so, and no token file appears there.
    other = tmp_path / "elsewhere"
    r = instance.cli("jobs", env=instance.env | {"RANKZERO_DATA_DIR": str(other)})
    assert r.returncode == 2 and "api_token" in r.stderr and "RANKZERO_DATA_DIR" in r.stderr, r.stderr
    assert not (other / "api_token").exists()

    # The right data dir, the wrong port: the message names where the URL came from.
    r = instance.cli("jobs", env=instance.env | {"RANKZERO_PORT": "9"})
    assert r.returncode == 1 and "RANKZERO_PORT" in r.stderr and "rankzero up" in r.stderr, r.stderr


def test_a_server_started_with_port_option_is_found_from_its_data_dir(tmp_path) -> None:
    data_dir = tmp_path / "opt"
    data_dir.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")} | {"RANKZERO_DATA_DIR": str(data_dir)}
    proc = _start(data_dir, env | {"RANKZERO_GPUS": ""}, "--port", str(port))
    try:
        _wait_healthy(port, proc)
        r = subprocess.run([RANKZERO, "jobs"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=90)
        assert r.returncode == 0, r.stderr
        assert "0 of 0" in r.stdout
    finally:
        _stop(proc)
    # uvicorn re-raises SIGTERM after its shutdown, so the record may stay: a dead pid's record is ignored.
    from cli.client import recorded_url
    from core.settings import Settings

    assert recorded_url(Settings(data_dir=data_dir)) is None


def test_what_a_job_says_prints_verbatim(instance, seeded) -> None:
    job = seeded["failed"]
    r = instance.cli("show", str(job))
    assert r.returncode == 0, r.stderr
    assert "BUILDERS[spec.name](**spec.args)" in r.stdout
    assert "'[bold]x[/bold]' :smile: [red]not red[/red]" in r.stdout
    r = instance.cli("jobs")
    r = instance.cli("logs", str(job), "--rank", "0", "--stream", "stderr")  # one stream: the bytes as they are
    assert r.stdout == LOG
    r = instance.cli("logs", str(job))  # the merged console: the same line, verbatim, behind its rank's prefix
    assert r.stdout.rstrip("\n").endswith(LOG.rstrip("\n")) and "r0" in r.stdout, r.stdout
    r = instance.cli("follow", str(job))  # already failed: its outcome and error, exit 1
    assert r.returncode == 1 and "failed" in r.stdout and "BUILDERS[spec.name]" in r.stdout, r.stdout + r.stderr


def test_show_has_readable_numbers_and_local_times(instance, seeded) -> None:
    r = instance.cli("show", str(seeded["done"]))
    assert r.returncode == 0, r.stderr
    assert "200/200" in r.stdout and "3,200" in r.stdout  # step/total; samples = 200 × 16
    assert "1,843" in r.stdout  # samples/s with a separator
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST", r.stdout), r.stdout  # TZ=Asia/Tokyo, named
    assert "+00:00" not in r.stdout


def test_tables_fit_80_columns(instance, seeded) -> None:
    for args in (["jobs"], ["show", str(seeded["done"])], ["checkpoints", str(seeded["done"])],
                 ["metrics", str(seeded["done"])]):  # fmt: skip
        r = instance.cli(*args, columns=80)
        assert r.returncode == 0, r.stderr
        wide = [line for line in r.stdout.splitlines() if len(line) > 80]
        assert not wide, f"{args}: lines wider than 80:\n" + "\n".join(wide)
    r = instance.cli("jobs", columns=80)
    assert sum("succeeded" in line for line in r.stdout.splitlines()) == 1  # a row stays one line


def test_empty_log_says_empty(instance, seeded) -> None:
    r = instance.cli("logs", str(seeded["failed"]), "--stream", "stdout")
    assert r.returncode == 0 and r.stdout == "" and "(empty)" in r.stderr


def test_metrics_table_and_json(instance, seeded) -> None:
    job = seeded["done"]
    r = instance.cli("metrics", str(job), "--json")
    assert r.returncode == 0, r.stderr
    summaries = {s["name"]: s for s in json.loads(r.stdout)}
    loss = summaries["train/loss"]
    assert loss["step"] == max(loss["step"], loss["min_step"], loss["max_step"])
    assert loss["min"] <= loss["latest"] <= loss["max"]
    r = instance.cli("metrics", str(job), "val/accuracy")
    assert r.returncode == 0 and "val/accuracy" in r.stdout and "train/loss" not in r.stdout
    r = instance.cli("metrics", str(job), "no/such")
    assert r.returncode == 0 and "(empty)" in r.stderr


def test_checkpoints_path_is_accepted_as_resume_from_and_resume_trains_past_it(instance, seeded) -> None:
    job = seeded["done"]
    r = instance.cli("checkpoints", str(job))
    assert r.returncode == 0, r.stderr
    printed = re.search(rf"job_{job}/checkpoints/step_00000200\.pt", r.stdout)
    assert printed, r.stdout
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{instance.port}/api",
        headers={"Authorization": f"Bearer {(instance.data_dir / 'api_token').read_text().strip()}"},
    )
    spec = api.get(f"/jobs/{job}").json()["spec"]
    # The printed path, as resume_from: accepted; a max_steps at the checkpoint: refused at submit.
    ok = api.post("/jobs", json={**spec, "resume_from": printed.group(0), "max_steps": 300})
    assert ok.status_code == 201, ok.text
    zero = api.post("/jobs", json={**spec, "resume_from": printed.group(0)})
    assert zero.status_code == 422 and "0 steps" in zero.text and "max_steps" in zero.text, zero.text
    wrong_batch = api.post("/jobs", json={**spec, "resume_from": printed.group(0), "max_steps": 300, "batch_size": 8})
    assert wrong_batch.status_code == 422 and "global batch" in wrong_batch.text, wrong_batch.text

    r = instance.cli("resume", str(job))  # finished at 200: trains as long again, to 400
    assert r.returncode == 0, r.stdout + r.stderr
    new_id = int(re.search(r"job (\d+) queued", r.stdout).group(1))
    new = api.get(f"/jobs/{new_id}").json()["spec"]
    assert new["max_steps"] == 400 and new["resume_from"].endswith(f"job_{job}/checkpoints/step_00000200.pt")
    r = instance.cli("resume", str(job), "--step", "100", "--max-steps", "150")
    assert r.returncode == 0, r.stdout + r.stderr
    new_id = int(re.search(r"job (\d+) queued", r.stdout).group(1))
    new = api.get(f"/jobs/{new_id}").json()["spec"]
    assert new["max_steps"] == 150 and new["resume_from"].endswith("step_00000100.pt")
    r = instance.cli("resume", str(job), "--step", "7")
    assert r.returncode == 1 and "no checkpoint at step 7" in r.stderr
    for queued in api.get("/jobs", params={"status": "queued"}).json()["items"]:
        api.post(f"/jobs/{queued['id']}/cancel")


def test_follow_attaches_to_a_running_job_until_it_ends(instance) -> None:
    from core.tables import JobStatus

    runs = instance.data_dir / "runs"
    engine = get_engine(f"sqlite:///{instance.data_dir / 'rankzero.db'}")
    with Session(engine) as db:
        job_id = seed_job(db, "follow-me", "running", runs_dir=runs, total_steps=100, step=40).id
    e = instance.env | {"COLUMNS": "100"}
    proc = subprocess.Popen([RANKZERO, "follow", str(job_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e, cwd=ROOT)  # fmt: skip
    try:
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()
        with Session(engine) as db:  # the worker's last writes
            row = db.get(Job, job_id)
            row.status, row.step, row.latest_loss = JobStatus.succeeded, 100, 0.125
            db.add(row)
            db.commit()
        out, errs = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + errs
    assert f"job {job_id}: succeeded at step 100/100, loss 0.125" in out, out


def _logs_on_a_terminal(instance: Instance, *args: str) -> str:
    """`rankzero logs …` with its stdout on a pseudo-terminal, as an operator would run it."""
    import pty

    leader, follower = pty.openpty()
    env = instance.env | {"COLUMNS": "200"}
    proc = subprocess.Popen([RANKZERO, "logs", *args], stdout=follower, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty closes when the command exits
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=90) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode(errors="replace")


def test_logs_on_a_terminal_show_a_jobs_escape_sequences_as_text_and_raw_keeps_them(instance, seeded) -> None:
    run_dir = instance.data_dir / "runs" / f"job_{seeded['failed']}"
    stdout = run_dir / "logs" / "attempt_1" / "run_0" / "attempt_0" / "0" / "stdout.log"
    stdout.write_text("step 1\x1b]0;owned\x07\x1b[2J done\n")
    try:
        shown = _logs_on_a_terminal(instance, str(seeded["failed"]), "--stream", "stdout")
        assert "\x1b" not in shown and "\\x1b]0;owned\\a\\x1b[2J done" in shown
        raw = _logs_on_a_terminal(instance, str(seeded["failed"]), "--stream", "stdout", "--raw")
        assert "\x1b]0;owned\x07\x1b[2J" in raw
    finally:
        stdout.write_text("")


def test_jobs_sort_by_a_field_and_refuse_a_bad_key(instance, seeded) -> None:
    by_name = instance.cli("jobs", "--sort=name", columns=120).stdout
    assert by_name.index("broken") < by_name.index("done")
    by_name_desc = instance.cli("jobs", "--sort=-name", columns=120).stdout
    assert by_name_desc.index("done") < by_name_desc.index("broken")
    r = instance.cli("jobs", "--sort=speed")
    assert r.returncode == 1 and "cannot sort by 'speed'" in r.stderr, r.stderr


def test_follow_says_a_queued_jobs_place_and_estimated_start_as_the_queue_moves(instance) -> None:
    """Issue 38: `rankzero follow` of a queued job drew a bar at 'queued' and said nothing of when it would
    start, though `show` and REST did. One host of 2 CPU slots, a running job that holds them (its ETA known),
    two queued behind it: the second's place and start are printed, then printed again once the first leaves
    the queue, until it starts and ends."""
    import queue
    import threading

    from core import hosts
    from core.settings import Settings
    from core.tables import JobStatus

    runs = instance.data_dir / "runs"
    database_url = f"sqlite:///{instance.data_dir / 'rankzero.db'}"
    box = Settings.model_validate(
        {"data_dir": instance.data_dir, "database_url": database_url, "host_name": "est-box", "cpu_slots": 2}
    )
    hosts.register(box, [])
    engine = get_engine(database_url)
    two = {"nproc": 2, "device": "cpu", "max_runtime_s": 600}
    with Session(engine) as db:
        ahead = seed_job(db, "holds-both", "running", runs_dir=runs, total_steps=100, step=50, spec=two).id
        first = seed_job(db, "queued-first", "queued", runs_dir=runs, total_steps=10, spec=two, minutes=2).id
        second = seed_job(db, "queued-second", "queued", runs_dir=runs, total_steps=10, spec=two, minutes=1).id
    lines: queue.Queue[str] = queue.Queue()
    proc = subprocess.Popen([RANKZERO, "follow", str(second)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=instance.env | {"COLUMNS": "200"}, cwd=ROOT)  # fmt: skip
    out: list[str] = []  # every line, in order (the reader is the one reader of the pipe)

    def read() -> None:
        for ln in iter(proc.stdout.readline, ""):  # type: ignore[union-attr]  (a pipe, above)
            out.append(ln)
            lines.put(ln)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def said(words: str) -> str:
        deadline = deadline_in(60)
        while True:
            hosts.beat(box)  # the host stays alive (as its worker would keep it) however slow the machine is
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                if time.monotonic() < deadline:
                    continue
                raise AssertionError(f"`rankzero follow` never said {words!r}: {''.join(out)}") from None
            if words in line:
                return line

    try:
        line = said(f"job {second} queued: #2 in its pool")
        # after the running job's 10 s left (its ETA) and the first's 600 s (its max_runtime_s)
        assert re.search(rf"starts in ~10:[01]\d \(when job {first} ends\)", line), line
        with Session(engine) as db:  # the queue moves: the first is cancelled before it starts
            row = db.get_one(Job, first)
            row.status = JobStatus.cancelled
            db.add(row)
            db.commit()
        line = said(f"job {second} queued: #1 in its pool, starts in ~")
        assert re.search(rf"starts in ~0:[01]\d \(when job {ahead} ends\)", line), line  # the running job's ETA
        with Session(engine) as db:  # the worker's writes: it starts, then ends
            for job_id in (ahead, second):
                row = db.get_one(Job, job_id)
                row.status, row.step, row.latest_loss = JobStatus.succeeded, 10 if job_id == second else 100, 0.5
                db.add(row)
            db.commit()
        proc.wait(timeout=seconds(30))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)
    assert proc.returncode == 0, "".join(out)
    assert f"job {second}: succeeded at step 10/10" in "".join(out), "".join(out)
