"""One cgroup per attempt: the kernel holds the job's processes to its memory limit and a pids limit,
and at attempt end every process in it is killed, whatever it did to escape (setsid, a double fork, an
empty environment). cgroup v1 (the `memory` and `pids` hierarchies) or v2 (unified), whichever the host has.

The attempt's cgroup sits under the worker's own (so a container's limits still bound it), named
`rankzero-<mark>`; the launcher's child joins it before it execs, and everything it starts inherits it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids")
PREFIX = "rankzero-"


def own_path(controller: str | None, proc_cgroup: str) -> str | None:
    """This process's cgroup path in one hierarchy, from /proc/self/cgroup's text (None: not there).
    `controller` None: the unified (v2) hierarchy, the `0::` line."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if controller is None and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if controller is not None and controller in parts[1].split(","):
            return parts[2]
    return None


@dataclass(frozen=True)
class Layout:
    """Where this host's job cgroups go: v1, a directory per controller; v2, one directory."""

    version: int
    bases: tuple[Path, ...]  # v1: (memory base, pids base); v2: (base,)


def detect(root: Path = ROOT) -> Layout | None:
    """The cgroup layout this worker may create attempt cgroups in (None: none usable).

    v2 first where it holds the memory and pids controllers (a pure v2 host); else v1 with both
    controllers mounted (a hybrid host, like Debian's and most containers' default)."""
    try:
        mine = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    v2 = own_path(None, mine)
    controllers = root / "cgroup.controllers"
    if v2 is not None and controllers.is_file():
        wanted = set(controllers.read_text().split())
        if {"memory", "pids"} <= wanted:
            base = root / v2.lstrip("/")
            if os.access(base, os.W_OK):
                return Layout(2, (base,))
    bases = []
    for controller in V1_CONTROLLERS:
        path = own_path(controller, mine)
        base = root / controller / (path or "/").lstrip("/")
        if path is None or not os.access(base, os.W_OK):
            return None
        bases.append(base)
    return Layout(1, tuple(bases))


@dataclass(frozen=True)
class AttemptCgroup:
    layout: Layout
    dirs: tuple[Path, ...]

    def join_self(self) -> None:
        """Move the calling process into the cgroup (the launcher's child calls it before exec)."""
        pid = str(os.getpid())
        for d in self.dirs:
            (d / "cgroup.procs").write_text(pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the memory limit (0 where the kernel does not say)."""
        name = "memory.events" if self.layout.version == 2 else "memory.oom_control"
        try:
            text = (self.dirs[0] / name).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def kill_all(self, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL every process in the cgroup until none is left; returns the pids found at first."""
        first = self.pids()
        deadline = time.monotonic() + timeout_s
        left = first
        while left and time.monotonic() < deadline:
            if self.layout.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.dirs[0] / "cgroup.kill").write_text("1")
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)  # a stopped process dies of SIGKILL too, but only once resumed
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
            left = self.pids()
        return first

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()  # fails while a process is still in it: left for the next sweep


def _write(path: Path, value: str) -> None:
    with contextlib.suppress(OSError):  # a knob this kernel lacks (memsw without swap accounting)
        path.write_text(value)


WORKER_LEAF = "rankzero-worker"


def _delegate(base: Path) -> None:
    """v2: enable the memory and pids controllers for the attempts' cgroups under `base`. The kernel
    allows that only in a cgroup with no processes of its own ("no internal processes"): the first
    time, the worker's processes move to a leaf beside the attempts' (a container's root cgroup)."""
    wanted = {"memory", "pids"}
    if wanted <= set((base / "cgroup.subtree_control").read_text().split()):
        return
    try:
        (base / "cgroup.subtree_control").write_text("+memory +pids")
        return
    except OSError:
        leaf = base / WORKER_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (base / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone, or a kernel thread
                (leaf / "cgroup.procs").write_text(pid)
    (base / "cgroup.subtree_control").write_text("+memory +pids")


def create(layout: Layout, mark: str, memory_limit_mb: int | None, pids_max: int) -> AttemptCgroup:
    """The attempt's cgroup with its limits (raises OSError when the kernel refuses one)."""
    name = PREFIX + mark
    if layout.version == 2:
        base = layout.bases[0]
        _delegate(base)
        d = base / name
        d.mkdir(exist_ok=True)
        if memory_limit_mb is not None:
            (d / "memory.max").write_text(str(memory_limit_mb * 2**20))
            _write(d / "memory.swap.max", "0")  # the limit is on memory, not on what swap can hide
        (d / "pids.max").write_text(str(pids_max))
        return AttemptCgroup(layout, (d,))
    memory, pids = (b / name for b in layout.bases)
    memory.mkdir(exist_ok=True)
    pids.mkdir(exist_ok=True)
    if memory_limit_mb is not None:
        (memory / "memory.limit_in_bytes").write_text(str(memory_limit_mb * 2**20))
        _write(memory / "memory.memsw.limit_in_bytes", str(memory_limit_mb * 2**20))
        _write(memory / "memory.swappiness", "0")
    (pids / "pids.max").write_text(str(pids_max))
    return AttemptCgroup(layout, (memory, pids))


def find(layout: Layout, mark: str) -> AttemptCgroup:
    name = PREFIX + mark
    return AttemptCgroup(layout, tuple(b / name for b in layout.bases))


SWEEP_AFTER_S = 300.0  # younger ones may belong to a launch on its way (created, not joined yet)


def sweep(layout: Layout) -> None:
    """Remove the empty cgroups earlier attempts left (a worker that died before its attempt's end)."""
    now = time.time()
    for base in layout.bases:
        with contextlib.suppress(OSError):
            for d in base.iterdir():
                if d.is_dir() and d.name.startswith(PREFIX):
                    with contextlib.suppress(OSError):
                        if now - d.stat().st_mtime > SWEEP_AFTER_S and not (d / "cgroup.procs").read_text().split():
                            d.rmdir()
