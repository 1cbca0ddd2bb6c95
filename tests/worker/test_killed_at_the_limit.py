"""A rank the kernel kills at the memory limit (SIGKILL) fails its job saying so: the rank guard dies the same
way (SIGKILL has no handler to reset: it raised OSError and the job's error was that), and the sandbox
remembers the kernel's kills past the attempt's end, when the supervisor asks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

from worker import sandbox, sandbox_disk


def test_the_rank_guard_dies_of_the_sigkill_its_child_died_of() -> None:
    child = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    done = subprocess.run([sys.executable, "-m", "worker.rank_guard", "1", *child], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert b"OSError" not in done.stderr


def test_the_kernels_kills_are_remembered_after_the_sandbox_ends(monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "_ended_ooms", {})
    cgroup = SimpleNamespace(kill_all=list, oom_kills=lambda: 2, remove=lambda: None)
    live = SimpleNamespace(cgroup=cgroup, watch_write=os.open(os.devnull, os.O_WRONLY), disk=sandbox_disk.DiskLimit())
    monkeypatch.setitem(sandbox._live, "job-7-1-abc", live)
    assert sandbox.oom_kills("job-7-1-abc") == 2  # while it runs: the cgroup's count
    ended = sandbox.end("job-7-1-abc")
    assert ended is not None and ended.oom_kills == 2
    assert sandbox.oom_kills("job-7-1-abc") == 2  # once ended: remembered for the supervisor's verdict
    assert sandbox.oom_kills("job-8-1-def") == 0
