"""Run-directory faults (issue 12 item 15): an event the trainer cannot write is retried, and a job
never succeeds with a hole in its record. Real Celery worker, torchrun and the real trainer; the
disk-full test mounts a small tmpfs of its own (root only, else skipped)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.jobs import points, run_dir, slow_spec, wait_step_written


def test_run_dir_deleted_mid_run_fails_the_job_saying_so(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    job = client.submit(slow_spec("run-dir-deleted", max_steps=60))  # still training well after step 5
    wait_step_written(run_dir(settings, job["id"]), 5, 120)  # the trainer's record; the API's step lags it
    shutil.rmtree(run_dir(settings, job["id"]))  # the trainer's open events.jsonl now writes into the void
    done = client.wait_terminal(job["id"], 120)
    assert done["status"] == "failed", done
    error = done["error"]
    # In its sandbox the job's run dir is a bind mount: the deletion reaches the ranks, and the worker names it;
    # unsandboxed (RANKZERO_SANDBOX=off) the trainer finishes into the void and its record is found incomplete.
    said = "was deleted while the job ran" in error or ("record is incomplete" in error and "events.jsonl" in error)
    assert said, error


@pytest.fixture
def small_tmpfs() -> Iterator[Callable[[Path], Path]]:
    """`mount(dir)`: a 4 MiB tmpfs of the test's own at `dir` (root only), lazily unmounted at the end."""
    mounted: list[Path] = []

    def mount(where: Path) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(where: Path) -> Path:
    """Write zeros until the file system is full; returns the filler file."""
    filler = where / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_disk_full_for_a_while_loses_no_event(service, workers, small_tmpfs) -> None:
    settings, client = service()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    # The first job of a fresh database is job 1: its run dir is a small tmpfs before it exists.
    where = small_tmpfs(run_dir(settings, 1))
    workers.start(settings)
    # 90 steps: still training when the disk has room again (its final checkpoint must find room).
    job = client.submit(slow_spec("disk-full", step_s=0.2, max_steps=90, every=1000))
    assert job["id"] == 1
    wait_step_written(where, 8, 120)  # the trainer's record; the API's step lags it
    filler = _fill(where)
    time.sleep(6)  # about 30 steps of events that cannot be written meanwhile
    filler.unlink()
    done = client.wait_terminal(job["id"], 150)
    if done["status"] == "succeeded":  # then the record is whole: every point, no seq gap
        assert points(client, job["id"]) == list(range(1, 91)), "succeeded with a hole in its record"
    else:
        assert "record is incomplete" in done["error"] or "full" in done["error"], done
    assert done["status"] == "succeeded", "a disk full for 6 s is retried through (WRITE_RETRY_S is 20 s)"
