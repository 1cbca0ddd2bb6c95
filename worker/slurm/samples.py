"""CPU and memory samples of a Slurm job's ranks, per node, as rankzero's own hosts record them (worker/resources.py
`ResourceWatch`, the same `sys/rank<N>/cpu_percent`, `sys/rank<N>/rss_mb` series).

The agent cannot see a compute node's processes: local rank 0 of each node starts a sampler process for that node's
processes of the job (those carrying its RANKZERO_JOB_MARK), which appends the points to
`logs/attempt_N/sys_node<K>.jsonl` on the shared file system; the agent reads them as it reads TensorBoard scalars
(idempotent per name and step). A node's totals are `sys/cpu_percent_total` / `sys/rss_mb_total` on node 0 (a
one-node job reads as on any host) and `sys/node<K>/…_total` on the others. Never an exception out of it: a node
that cannot sample records nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rank imports this module before anything heavy: the agent alone needs the type
    from worker.ingest_handlers import TimedMetric

SAMPLES_GLOB = "sys_node*.jsonl"


def samples_file(run_dir: str | Path, attempt: int, node: int) -> Path:
    return Path(run_dir) / "logs" / f"attempt_{int(attempt)}" / f"sys_node{int(node)}.jsonl"


def node_name(name: str, node: int) -> str:
    """A node's series name: per-rank names are global already; node K > 0's totals get their own names."""
    if node and name.startswith("sys/") and name.endswith("_total"):
        return f"sys/node{node}/{name[4:]}"
    return name


def start(environ: os._Environ[str] | dict[str, str], interval_s: float = 5.0) -> subprocess.Popen[bytes] | None:
    """On local rank 0 of a node: a sampler process for this node's processes of the job (None elsewhere). A process
    of its own, not a thread: a process never lists itself among the job's (worker/procs.py), and rank 0 is one."""
    mark, run_dir, attempt = (environ.get(k) for k in ("RANKZERO_JOB_MARK", "RANKZERO_RUN_DIR", "RANKZERO_ATTEMPT"))
    if environ.get("SLURM_LOCALID") != "0" or not mark or not run_dir or not (attempt or "").isdigit():
        return None
    node = int(environ.get("SLURM_NODEID") or 0)
    path = samples_file(run_dir, int(attempt or 0), node)
    argv = [sys.executable, "-m", "worker.slurm.samples", str(path), str(node), str(interval_s), str(os.getpid())]
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=dict(environ))
    except OSError as exc:
        print(f"rankzero: no CPU/memory samples on this node: {exc}", file=sys.stderr, flush=True)
        return None


def sample(mark: str, path: Path, node: int, interval_s: float, rank_pid: int) -> None:
    """Sample until rank `rank_pid` (our parent) is gone: the points of each sample appended to `path`."""
    from worker.resources import ResourceWatch

    # No memory limit here (Slurm enforces --mem): `settings` without one.
    # The second sample 1 s after the first: a CPU rate needs two, and a short job must not end with memory only.
    first_gap = min(1.0, interval_s)
    watch = ResourceWatch(mark, memory_limit_mb=None, gpus=None, interval_s=first_gap, settings=SimpleNamespace())
    polls = 0
    while os.getppid() == rank_pid:
        taken = watch.poll(time.monotonic(), 0)
        if taken is not None:
            polls += 1
            if polls == 2:
                watch.interval_s = interval_s
        if taken is not None and taken.points:
            lines = [json.dumps({**e, "name": node_name(e["name"], node)}) for e in taken.events()]
            with open(path, "a") as out:
                out.write("\n".join(lines) + "\n")
        time.sleep(max(0.05, watch.due() - time.monotonic()))


def main(argv: list[str]) -> int:
    path, node, interval_s, rank_pid = Path(argv[0]), int(argv[1]), float(argv[2]), int(argv[3])
    try:
        sample(os.environ["RANKZERO_JOB_MARK"], path, node, interval_s, rank_pid)
    except Exception as exc:
        print(f"rankzero: CPU/memory samples stopped on node {node}: {exc}", file=sys.stderr, flush=True)
    return 0


class SampleTail:
    """The agent's reader of one attempt's sample files: new whole lines since the last read, as metrics."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.offsets: dict[Path, int] = {}

    def read(self) -> list[TimedMetric]:
        from worker.ingest_handlers import TimedMetric

        out: list[TimedMetric] = []
        for path in sorted(self.logs.glob(SAMPLES_GLOB)):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except OSError:
                continue
            whole = data[: data.rfind(b"\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(whole)
            for line in whole.splitlines():
                try:
                    p = json.loads(line)
                    out.append(TimedMetric(type="metric", time=float(p["time"]), step=int(p["step"]),
                                           name=str(p["name"]), value=float(p["value"])))  # fmt: skip
                except (ValueError, KeyError, TypeError):
                    continue
        return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
