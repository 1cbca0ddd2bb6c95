"""Fault 7: the disk fills up, or rank 0 is killed between writing a checkpoint and renaming it.
The previous checkpoint must still load and still be the one listed."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.deadlines import deadline_in
from tests.support.jobs import events, points, run_dir, slow_spec, wait
from tests.support.procs import wait_ranks


def _listed(client: Any, job_id: int) -> list[dict[str, Any]]:
    return sorted(client.http.get(f"/jobs/{job_id}/checkpoints").json(), key=lambda c: c["step"])


def _loads_and_matches(path: Path, sha256: str) -> None:
    import torch

    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    assert {"model", "optimizer", "step"} <= ckpt.keys()


@pytest.fixture
def small_disk(tmp_path: Path):
    """`mount(dir)`: a tmpfs of our own over `dir` (1 MiB, shrinkable with `resize`); unmounted after."""
    mounted: list[Path] = []

    class Disk:
        def mount(self, where: Path) -> None:
            where.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)], capture_output=True, text=True
            )
            if done.returncode != 0:
                pytest.skip(f"cannot mount a small tmpfs here (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
            mounted.append(where)

        def resize(self, where: Path, size: int) -> None:
            subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True, capture_output=True)

    yield Disk()
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def _freeze_between_checkpoints(ckpt_dir: Path, ranks: list[int], timeout: float) -> None:
    """SIGSTOP the job's ranks at a moment no checkpoint is being written (no temp file), so what is measured
    on its disk next is what the job will find when it goes on. The caller SIGCONTs them."""
    deadline = deadline_in(timeout)
    while time.monotonic() < deadline:
        for pid in ranks:
            os.kill(pid, signal.SIGSTOP)
        if not any(".tmp-" in n for n in os.listdir(ckpt_dir)):
            return
        for pid in ranks:
            os.kill(pid, signal.SIGCONT)  # mid-write: let it finish, try again
        time.sleep(0.05)
    raise AssertionError("never found the job between two checkpoints")


def test_disk_full_during_checkpoint_keeps_the_previous_one(service, workers, small_disk) -> None:
    settings, client = service()
    job = client.submit(slow_spec("disk-full", max_steps=400, every=10, max_restarts=0))
    ckpt_dir = run_dir(settings, job["id"]) / "checkpoints"
    small_disk.mount(ckpt_dir)  # before any worker exists, so the job's checkpoints land on it
    workers.start(settings)
    ranks = list(wait_ranks(workers.marker, job["id"], 2).values())
    wait(lambda: _listed(client, job["id"]), 120, "the first checkpoint to be listed")
    # Measure and shrink while the job is frozen between checkpoints: a checkpoint written between the
    # measurement and the resize would make the new size smaller than what is already used.
    _freeze_between_checkpoints(ckpt_dir, ranks, 60)
    try:
        whole = sorted(p.name for p in ckpt_dir.glob("step_*.pt"))  # keep_last 3: one to three by now
        kept = ckpt_dir / whole[-1]
        disk = os.statvfs(ckpt_dir)
        used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
        # Room for half of one more checkpoint: the next save runs out of space mid-write.
        small_disk.resize(ckpt_dir, ((used + kept.stat().st_size // 2) // 4096 + 1) * 4096)
    finally:
        for pid in ranks:
            os.kill(pid, signal.SIGCONT)

    done = client.wait_terminal(job["id"], 90)
    assert done["status"] == "failed", done
    assert "No space left on device" in done["error"], done["error"]
    assert f"{kept.name} is intact" in done["error"], done["error"]
    listed = _listed(client, job["id"])
    assert [Path(c["path"]).name for c in listed] == whole, listed
    assert sorted(p.name for p in ckpt_dir.iterdir()) == whole, "a half-written file was left behind"
    _loads_and_matches(run_dir(settings, job["id"]) / listed[-1]["path"], listed[-1]["sha256"])


def _catch_between_write_and_rename(ckpt_dir: Path, rank0: int, timeout: float) -> int:
    """Freeze rank 0 while a checkpoint's temp file exists and its final name does not, then kill it.
    Returns the step of the checkpoint it was writing. SIGSTOP first: the check after it is then race-free."""
    deadline = deadline_in(timeout)
    while time.monotonic() < deadline:
        temp = [n for n in os.listdir(ckpt_dir) if n.startswith(".step_") and ".tmp-" in n]
        if not temp:
            continue
        os.kill(rank0, signal.SIGSTOP)
        step = int(temp[0].split("_")[1].split(".")[0])  # .step_00000030.pt.tmp-123 → 30
        if (ckpt_dir / temp[0]).exists() and not (ckpt_dir / f"step_{step:08d}.pt").exists():
            os.kill(rank0, signal.SIGKILL)
            return step
        os.kill(rank0, signal.SIGCONT)  # the rename won the race; wait for the next checkpoint
        time.sleep(0.5)
    raise AssertionError("never caught a checkpoint between write and rename")


def test_kill_between_write_and_rename_keeps_the_previous_one(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    # A wider model makes each checkpoint ~17 MB, so the write → fsync → rename window is wide enough to hit.
    spec = slow_spec("torn-checkpoint", step_s=0.02, max_steps=50, every=10, max_restarts=1)
    spec["model"]["args"]["hidden"] = [2048, 2048]
    job = client.submit(spec)
    ckpt_dir = run_dir(settings, job["id"]) / "checkpoints"
    rank0 = wait_ranks(workers.marker, job["id"], 2, attempt=1)[0]
    wait(lambda: _listed(client, job["id"]), 120, "a first checkpoint")
    caught = _catch_between_write_and_rename(ckpt_dir, rank0, 60)
    listed = wait(lambda: client.job(job["id"])["attempt"] == 2 and _listed(client, job["id"]), 60, "the restart")
    previous = listed[-1]
    assert previous["step"] == caught - 10, (caught, listed)

    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    starts = [e["start_step"] for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert starts == [0, caught - 10], f"attempt 2 must resume from the checkpoint before the torn one ({starts})"
    listed = _listed(client, job["id"])
    assert listed[-1]["step"] == 50
    for row in listed:
        _loads_and_matches(run_dir(settings, job["id"]) / row["path"], row["sha256"])
    assert points(client, job["id"]) == list(range(1, 51))
