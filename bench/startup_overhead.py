"""Start-up overhead (issue 27 item 3, issue 29): the same torchrun script bare and through rankzero, submit →
its first output line, alternating, with where each second goes.

    .venv/bin/python bench/startup_overhead.py [--rounds 4] [--nproc 2] [--before DIR] [--cli]
    .venv/bin/python bench/startup_overhead.py --pieces 20 [--before DIR]

The script (written to a temp folder) stamps the time at its first line, after `import torch` and after
joining its gloo process group, prints `iter 0` as nanoGPT's loop does at its first iteration, then writes
its stamps (and the start times of its own process, of torchrun and of torchrun's parent, read from /proc)
to stderr and exits.
- bare: `torchrun --nproc-per-node N train.py`, from just before Popen to `iter 0` on its stdout;
- rankzero: POST /api/jobs (entrypoint `train.py`, the bundle uploaded once beforehand, as a second
  `rankzero submit` of an unchanged folder does) to a live API with an idle worker (`rankzero worker`,
  sandbox as configured: RANKZERO_SANDBOX), until `iter 0` is in rank 0's log; then until the console's
  `loss` point is in the database (GET /jobs/{id}/metrics). `--cli`: submitted by `rankzero submit spec.json
  --code DIR` instead (the CLI's own start and its pack / upload checks included; the folder unchanged since
  the warm-up submit, as a user's second submit).
- `--before DIR`: another tree's code (`git archive HEAD | tar -x -C DIR`) served beside this one, each in a
  process of its own; every round runs bare, before and after, in a rotating order, so drifting load hits
  all three alike.

`--pieces N`: only the CPU time of each piece rankzero's start changed, the old way beside the new (torchrun's
guard with and without `site`, node 0's scan of every process, `import cli.code` of `--before`'s tree and of
this one): CPU time, unlike the stages' wall time, holds on a loaded machine.

Printed: each round, then the median of each stage side by side. The stages come from the job's timeline
(created, claimed, running), its row (`vouched_at`: when the scheduler placed it), /proc start times seen
from the rank, and the rank's own stamps. Wall-clock figures on a loaded machine drift: read the stages
that rankzero adds (bare has none of them) and the ratios of the shared ones, not one total.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# RANKZERO_BENCH_CODE: the tree whose service this process runs (`--before`'s child); else this one.
ROOT = Path(os.environ.get("RANKZERO_BENCH_CODE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

SCRIPT = """\
import os, sys, time
t_script = time.time()
import json
import torch
t_torch = time.time()
import torch.distributed as dist

dist.init_process_group("gloo")
t_group = time.time()
imported = [None] * dist.get_world_size()
dist.all_gather_object(imported, t_torch)  # init waits for the last rank: when did it arrive?
if dist.get_rank() == 0:
    t_print = time.time()
    print("iter 0: loss 3.9123, time 40.12ms, mfu -100.00%", flush=True)

    def stat(pid):
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()

    def started(pid):  # the process's start, as wall-clock time (its /proc start is in ticks since boot)
        ticks = int(stat(pid)[19])
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))

    torchrun = os.getppid()
    launcher = int(stat(torchrun)[1])
    stamps = {"launcher": started(launcher) if launcher > 0 else None, "torchrun": started(torchrun),
              "rank": started(os.getpid()), "script": t_script, "torch": t_torch, "group": t_group,
              "print": t_print, "last_torch": max(imported)}
    print("rankzero-bench-stamps " + json.dumps(stamps), file=sys.stderr, flush=True)
dist.barrier()
dist.destroy_process_group()
"""
MARK = b"iter 0:"
STAMPS = b"rankzero-bench-stamps "
FIRST_LINE = "first line"  # the stage every run has: start → `iter 0` seen


def _wait_for(find: Callable[[], Any], timeout: float = 300, what: str = "`iter 0` line") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.01)
    raise TimeoutError(f"no {what}")


def _stamps(text: bytes) -> dict[str, float] | None:
    for line in text.splitlines():
        if line.startswith(STAMPS):
            return json.loads(line[len(STAMPS) :])
    return None


def _rank_stages(t0: float, launched: float | None, stamps: dict[str, float], seen: float) -> dict[str, float]:
    """The stages every run shares (torchrun and the rank), from the rank's stamps; `launched`: when the
    command that starts torchrun began (rankzero: its launcher's process start; bare: Popen, t0)."""
    out: dict[str, float] = {}
    if launched is not None:
        out["launcher → torchrun start"] = stamps["torchrun"] - launched
    out.update({
        "torchrun start → rank start": stamps["rank"] - stamps["torchrun"],
        "rank start → script's 1st line": stamps["script"] - stamps["rank"],
        "import torch": stamps["torch"] - stamps["script"],
        "rank 0 imported → last rank did": stamps["last_torch"] - stamps["torch"],
        "init_process_group (after the last)": stamps["group"] - stamps["last_torch"],
        "print → seen in its log": seen - stamps["print"],
        FIRST_LINE: seen - t0,
    })  # fmt: skip
    return out


def bare(folder: Path, nproc: int) -> dict[str, float]:
    from worker.launch_command import free_port, rank_env

    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "train.py"]  # fmt: skip
    out = folder / f"bare-{time.monotonic_ns()}.log"
    t0 = time.time()
    with open(out, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=folder, env=rank_env("bench", None), stdout=fh, stderr=subprocess.STDOUT)
    try:
        seen = _wait_for(lambda: MARK in out.read_bytes() and time.time())
    finally:
        proc.wait(timeout=120)
    stamps = _wait_for(lambda: _stamps(out.read_bytes()), 30, "stamps")
    return _rank_stages(t0, t0, stamps, seen)


def _rank0_logs(run_dir: Path) -> bytes:
    text = b""
    for path in sorted(run_dir.glob("logs/**/*")):
        if path.is_file():
            try:
                text += path.read_bytes() + b"\n"
            except OSError:
                continue
    return text


def _at(value: str | None) -> float | None:
    if value is None:
        return None
    at = datetime.fromisoformat(value)
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def _placed_at(settings: Any, job_id: int) -> float | None:
    """When the scheduler placed the job (its row's `vouched_at`, written with the placement)."""
    from sqlalchemy import text

    from core.db import get_engine

    with get_engine(settings.resolved_database_url).connect() as conn:
        value = conn.execute(text("SELECT vouched_at FROM jobs WHERE id = :id"), {"id": job_id}).scalar()
    if value is None:
        return None
    return _at(value if isinstance(value, str) else value.isoformat())


def _in_database(client: Any, job_id: int) -> bool:
    r = client.get(f"/jobs/{job_id}/metrics", params={"name": "loss"})
    return r.status_code == 200 and any(s["points"] for s in r.json()["series"])


def _cli_submit(client: Any, folder: Path, nproc: int) -> int:
    """`rankzero submit spec.json --code FOLDER` as a user types it; the job's id."""
    from bench.service import BENCH_TOKEN

    spec = folder.parent / "spec.json"
    spec.write_text(json.dumps({"name": "bench-startup", "entrypoint": "train.py", "nproc": nproc, "device": "cpu"}))
    url = str(client.base_url).removesuffix("/").removesuffix("/api")
    env = os.environ | {"RANKZERO_URL": url, "RANKZERO_API_TOKEN": BENCH_TOKEN,
                        "XDG_CACHE_HOME": str(folder.parent / "cache")}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "cli.main", "submit", str(spec), "--code", str(folder)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"rankzero submit failed: {done.stdout}{done.stderr}")
    return max(j["id"] for j in client.get("/jobs").json()["items"])


def through_rankzero(settings: Any, client: Any, code: str | Path, nproc: int) -> dict[str, float]:
    """Submit → first line, stage by stage; `code` a folder: through `rankzero submit --code` (the CLI's start,
    its pack check and upload check included), else POST /jobs with that bundle."""
    spec = {"name": "bench-startup", "code": code, "entrypoint": "train.py", "nproc": nproc, "device": "cpu"}
    t0 = time.time()
    if isinstance(code, Path):
        job_id = _cli_submit(client, code, nproc)
    else:
        r = client.post("/jobs", json=spec)
        r.raise_for_status()
        job_id = r.json()["id"]
    posted = time.time()
    run_dir = Path(settings.resolved_runs_dir) / f"job_{job_id}"
    seen = _wait_for(lambda: MARK in _rank0_logs(run_dir) and time.time())
    stored = _wait_for(lambda: _in_database(client, job_id) and time.time(), 60, "console point in the database")
    deadline = time.monotonic() + 120
    while (job := client.get(f"/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench job {job_id} did not finish")
        time.sleep(0.1)
    at = {t["status"]: _at(t["at"]) for t in reversed(job["transitions"])}  # the first of each status
    stamps = _stamps(_rank0_logs(run_dir))
    if stamps is None:
        raise RuntimeError(f"bench job {job_id} ({job['status']}) wrote no stamps; see {run_dir}")
    created, placed, claimed, running = at["queued"], _placed_at(settings, job_id), at["starting"], at["running"]
    assert created is not None and placed is not None and claimed is not None and running is not None
    return {
        ("rankzero submit (CLI) returned" if isinstance(code, Path) else "POST /jobs (answered)"): posted - t0,
        "submit → row created": created - t0,
        "created → placed (scheduler)": placed - created,
        "placed → claimed (broker, task)": claimed - placed,
        "claimed → launcher start": stamps["launcher"] - claimed,
        "launcher start → `running` row": running - stamps["launcher"],
        **_rank_stages(t0, stamps["launcher"], stamps, seen),
        "seen → console point in database": stored - seen,
    }


# --- one tree's service, in a process of its own (`--serve`) -------------------------------------


def serve(tmp: Path, nproc: int, cli: bool) -> None:
    """A live service of ROOT's code: one submit per line read on stdin, its stages as a JSON line."""
    from bench.service import live_service
    from core import bundles

    folder = tmp / "project"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(SCRIPT)
    with live_service(tmp / "service") as (settings, client):
        packed = bundles.pack(folder, tmp / "b.tar.gz")
        r = client.post("/code", content=packed.archive.read_bytes(), headers={"Content-Type": "application/gzip"})
        r.raise_for_status()
        code: str | Path = folder if cli else f"sha256:{packed.sha256}"
        through_rankzero(settings, client, code, nproc)  # warm: the bundle unpacked, imports cached
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            print(json.dumps(through_rankzero(settings, client, code, nproc)), flush=True)


class Tree:
    """A tree's service in a child process (`--serve`), asked for one submit at a time."""

    def __init__(self, label: str, root: Path, tmp: Path, nproc: int, cli: bool) -> None:
        self.label = label
        env = os.environ | {"RANKZERO_BENCH_CODE": str(root), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(tmp / label), "--nproc", str(nproc),
               *(["--cli"] if cli else [])]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {label} service did not start")

    def submit(self) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} service ended")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _table(columns: dict[str, list[dict[str, float]]]) -> str:
    names: list[str] = []
    for rows in columns.values():
        for row in rows:
            names += [n for n in row if n not in names]
    names.sort(key=lambda n: n == FIRST_LINE)  # the total last, each stage in the order it happens
    head = f"{'stage (median s)':36}" + "".join(f"{label:>10}" for label in columns)
    lines = [head, "-" * len(head)]
    for name in names:
        cells = []
        for rows in columns.values():
            values = [r[name] for r in rows if name in r]
            cells.append(f"{statistics.median(values):10.3f}" if values else f"{'-':>10}")
        lines.append(f"{name:36}" + "".join(cells))
    return "\n".join(lines)


# --- the pieces rankzero adds, as CPU time (robust to a loaded machine's neighbours) --------------------


def _child_cpu(cmd: list[str], env: dict[str, str] | None = None, **kw: Any) -> float:
    """CPU seconds (user + system) that `cmd` and its children used."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pieces(before: Path | None, reps: int) -> None:
    """CPU time of each piece of the start that rankzero adds, the old way beside the new, alternating."""
    import resource

    from worker import procs
    from worker.launch_command import guard_command, rank_env

    env = rank_env("bench", None)
    read, write = os.pipe()
    guard_args = [str(read), "5", "/bin/true"]
    old_guard = [sys.executable, "-m", "worker.sandbox_guard", *guard_args]
    new_guard = [*guard_command("worker.sandbox_guard"), *guard_args]
    cli_import = [sys.executable, "-c", "import cli.code"]
    rows: dict[str, tuple[list[float], list[float]]] = {
        "torchrun's guard: start and run /bin/true": ([], []),
        "node 0: scan every process for an earlier attempt": ([], []),
        "rankzero submit --code: import cli.code": ([], []),
    }
    for _ in range(reps):
        old, new = rows["torchrun's guard: start and run /bin/true"]
        old.append(_child_cpu(old_guard, env, pass_fds=(read,)))
        new.append(_child_cpu(new_guard, env, pass_fds=(read,)))
        old, new = rows["node 0: scan every process for an earlier attempt"]
        t0 = resource.getrusage(resource.RUSAGE_SELF)
        procs.pids_of_run(Path("/nonexistent-run"), 1)
        t1 = resource.getrusage(resource.RUSAGE_SELF)
        old.append((t1.ru_utime - t0.ru_utime) + (t1.ru_stime - t0.ru_stime))
        new.append(0.0)  # a first attempt no longer scans (worker/node_zero.py `_before_launch`)
        if before is not None:
            old, new = rows["rankzero submit --code: import cli.code"]
            old.append(_child_cpu(cli_import, os.environ | {"PYTHONPATH": str(before)}, cwd=before))
            new.append(_child_cpu(cli_import, os.environ | {"PYTHONPATH": str(ROOT)}, cwd=ROOT))
    os.close(read)
    os.close(write)
    processes = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    print(f"CPU seconds, median of {reps} alternating runs ({processes} processes on this host)")
    print(f"{'piece':52}{'before':>10}{'after':>10}")
    for name, (old, new) in rows.items():
        if old:
            print(f"{name:52}{statistics.median(old):10.3f}{statistics.median(new):10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--before", type=Path, help="another tree's code, measured beside this one")
    parser.add_argument("--cli", action="store_true", help="submit with `rankzero submit --code` (else POST /jobs)")
    parser.add_argument("--pieces", type=int, metavar="N", help="only the CPU time of each piece, N runs of each")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pieces:
        pieces(args.before.resolve() if args.before else None, args.pieces)
        return
    if args.serve is not None:
        serve(args.serve, args.nproc, args.cli)
        return
    with tempfile.TemporaryDirectory(prefix="rz-startup-") as tmp_name:
        tmp = Path(tmp_name)
        folder = tmp / "bare"
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
        trees = [Tree("after", ROOT, tmp, args.nproc, args.cli)]
        if args.before is not None:
            trees.insert(0, Tree("before", args.before.resolve(), tmp, args.nproc, args.cli))
        try:
            bare(folder, args.nproc)  # warm the page cache as the services' warm-up submit did
            runs: dict[str, list[dict[str, float]]] = {"bare": [], **{t.label: [] for t in trees}}
            order: list[Tree | None] = [None, *trees]
            for i in range(args.rounds):
                turn = order[i % len(order) :] + order[: i % len(order)]  # rotate: no one always goes first
                for tree in turn:
                    label = "bare" if tree is None else tree.label
                    runs[label].append(bare(folder, args.nproc) if tree is None else tree.submit())
                totals = "   ".join(f"{label} {rows[-1][FIRST_LINE]:6.2f} s" for label, rows in runs.items())
                print(f"round {i + 1}: {totals}", flush=True)
        finally:
            for tree in trees:
                tree.close()
    print()
    print(_table(runs))
    b = statistics.median(r[FIRST_LINE] for r in runs["bare"])
    for label, rows in runs.items():
        if label != "bare":
            over = [r[FIRST_LINE] - bare_row[FIRST_LINE] for r, bare_row in zip(rows, runs["bare"], strict=True)]
            print(f"{label}: submit → first line {statistics.median(r[FIRST_LINE] for r in rows):.2f} s against bare "
                  f"{b:.2f} s; overhead per round median {statistics.median(over):+.2f} s "
                  f"({', '.join(f'{o:+.2f}' for o in over)})")  # fmt: skip


if __name__ == "__main__":
    main()
