"""A rank's Python stacks, taken by py-spy from the worker (issue 38: which rank is stuck, and where).

`py-spy dump --pid` attaches with ptrace to the rank's process (the host pid: worker/procs.py `rank_pids`)
and prints every thread's Python frames. The worker runs outside the job's sandbox, in the host's pid
namespace: it may trace the job's processes where it holds CAP_SYS_PTRACE (a root worker; a container
needs `cap_add: SYS_PTRACE`) or is their uid and the kernel's Yama ptrace_scope allows it (0; 1 allows only
descendants, and the ranks are the worker's descendants through bwrap). Where it cannot attach, the dump
is replaced by a sentence saying so and what would let it, never a failure of the job's outcome.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DUMP_TIMEOUT_S = 20.0
STACK_MAX_CHARS = 16_000  # of one rank's dump kept on the job
HOW_TO_ALLOW = (
    "the worker needs ptrace over the job's processes: run it as root or with CAP_SYS_PTRACE (a container: "
    "`cap_add: [SYS_PTRACE]`), or as the jobs' user with kernel.yama.ptrace_scope at 0 or 1"
)


@dataclass(frozen=True)
class Dump:
    """A rank's stacks (`text`), or why there are none (`unavailable`, a sentence for the job page)."""

    text: str | None = None
    unavailable: str | None = None


def py_spy() -> str | None:
    """The py-spy executable: beside the worker's Python (its venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def dump(pid: int, rank: int, timeout_s: float = DUMP_TIMEOUT_S) -> Dump:
    """Rank `rank`'s stacks (host pid `pid`), or why they could not be taken."""
    exe = py_spy()
    if exe is None:
        return Dump(unavailable="py-spy is not installed beside the worker (it is a dependency: reinstall rankzero)")
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return Dump(unavailable=f"py-spy did not finish its dump of rank {rank} within {timeout_s:g} s")
    except OSError as exc:
        return Dump(unavailable=f"py-spy could not run: {exc}")
    if done.returncode != 0 or not done.stdout.strip():
        said = " ".join((done.stderr or done.stdout).split())[:300]
        return Dump(unavailable=f"py-spy could not attach to rank {rank} (pid {pid}): {said}; {HOW_TO_ALLOW}")
    return Dump(text=done.stdout[:STACK_MAX_CHARS])
