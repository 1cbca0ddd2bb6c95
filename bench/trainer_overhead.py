"""Steady state: a 2-rank DDP job through rankzero's trainer vs the same loop under bare torchrun.

    .venv/bin/python bench/trainer_overhead.py [--rounds 3] [--steps 1500] [--warmup 300]
        [--repo LABEL=PATH ...] [--service] [--profile]

The issue's job (issue 29): MLP 784-512-512-10 on synthetic data, batch 64 per rank, SGD with
momentum, 2 ranks, gloo on CPU (OMP_NUM_THREADS=1 each), the loss reduced to rank 0 every 10 steps.
Cases, alternating round by round so a neighbour's burst hits each alike:

* `bare`: the PyTorch DDP tutorial's loop (TensorDataset + DistributedSampler + DataLoader, DDP,
  zero_grad / forward / backward / step) plus what the trainer promises per 10 steps: the loss
  summed on the device and reduced to rank 0, read there. Under `torchrun --standalone`.
* `trainer@LABEL`: the trainer of code tree LABEL (`--repo`; default: this checkout), exactly as
  `python -m trainer` runs it, under the same torchrun. Its progress events (every 10 steps) also
  carry rank 0's CPU time. E.g. `--repo before=/tmp/tbase --repo after=.` with
  `git archive HEAD | tar -x -C /tmp/tbase` puts the code before and after a change side by side.
* `service@LABEL` (`--service`): the same job submitted to `rankzero up` of the last tree (the real
  trainer, in its sandbox: bubblewrap namespaces + a cgroup, beside the worker and the API); rank
  0's CPU is read from /proc and its step at that moment from the progress events around it.

Two figures per run, both rank 0's over steps `warmup`..`steps`: steps/s (the median 100-step
window, wall clock: what a user waits for, disturbed by a loaded machine) and CPU ms per step (the
process's CPU time over the window: every thread of rank 0 — gloo's, the event writer's — and far
less disturbed by neighbours). Ratios are case / bare, per round and of the medians.

`--profile`: one more run of each torchrun case with cProfile on rank 0's training thread (its CPU
time, `time.thread_time`) over the same steps, printed as µs per step by part of the step:
forward + loss, backward (the DDP all-reduce runs on gloo's threads and is waited for here), the
optimizer, the lr schedule, fetching the batch, the loss reduce + log, and the rest (the loop's own
bookkeeping). cProfile slows Python-heavy parts alike in every case: compare columns, not absolutes.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The MLP's widths, input to classes (`--shape`, passed to the ranks in the environment): the by
# default; a tiny one (`--shape 8-8-2`) leaves little but what a loop adds per step around the math.
SHAPE_ENV = "RANKZERO_BENCH_SHAPE"
_WIDTHS = [int(w) for w in os.environ.get(SHAPE_ENV, "784-512-512-10").split("-")]
IN_FEATURES, HIDDEN, CLASSES = _WIDTHS[0], _WIDTHS[1:-1], _WIDTHS[-1]
NUM_SAMPLES, BATCH = 16_384, 64
LOG_EVERY = 10  # the loss is reduced to rank 0 (and a progress event written) every 10 steps
CHUNK = 100  # steps per timing window; a run's steps/s is its median window (robust to a neighbour's burst)


# ------------------------------------------------------------------------------ the ranks' side
def bare_worker(steps: int, warmup: int, result_path: str, profile_path: str | None) -> None:
    """The hand-written DDP loop (runs under torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_SAMPLES, IN_FEATURES, generator=gen)
    y = (x @ torch.randn(IN_FEATURES, CLASSES, generator=gen)).argmax(dim=1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=True)
    widths = [IN_FEATURES, *HIDDEN]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = DDP(nn.Sequential(*layers, nn.Linear(widths[-1], CLASSES)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_sum = torch.zeros((), dtype=torch.float64)
    profiler = _Profiler(profile_path if rank == 0 else None)
    step, epoch, marks = 0, 0, []
    while step < steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1
            if step % LOG_EVERY == 0:
                _reduce_loss(loss_sum, LOG_EVERY * BATCH)
            if step == warmup:
                profiler.start()
            if step >= warmup and step % LOG_EVERY == 0:
                marks.append((step, time.perf_counter(), time.process_time()))
            if step == steps:
                break
        epoch += 1
    profiler.stop(steps - warmup)
    if rank == 0:
        Path(result_path).write_text(json.dumps(marks))
    dist.destroy_process_group()


def _reduce_loss(loss_sum, samples: int) -> float | None:
    """The bare loop's every-10-steps loss: one reduce to rank 0 and one host read there."""
    import torch
    import torch.distributed as dist

    totals = torch.stack([loss_sum, torch.tensor(float(samples), dtype=torch.float64)])
    loss_sum.zero_()
    dist.reduce(totals, dst=0)
    if dist.get_rank() != 0:
        return None
    total, count = totals.tolist()
    return total / count


def trainer_worker(spec_path: str, run_dir: str, warmup: int, profile_path: str | None) -> None:
    """The trainer (runs under torchrun): exactly `python -m trainer`, except that progress events
    also carry this process's CPU time (and, profiling, rank 0's loop is profiled from step `warmup`)."""
    from trainer.event_types import EventType
    from trainer.events import EventLog
    from trainer.spec_file import load_spec
    from trainer.train import train

    emit = EventLog.emit
    spec = load_spec(spec_path)
    profiler = _Profiler(profile_path if os.environ.get("RANK") == "0" else None)

    def emit_with_cpu(self, type_, **fields):
        if type_ == EventType.progress:
            fields["cpu_s"] = time.process_time()
            if fields["step"] == warmup:
                profiler.start()
        elif type_ == EventType.finished:
            profiler.stop(spec.max_steps - warmup if spec.max_steps else 0)
        emit(self, type_, **fields)

    EventLog.emit = emit_with_cpu
    with contextlib.redirect_stdout(io.StringIO()) if profile_path else contextlib.nullcontext():
        train(spec, run_dir)


class _Profiler:
    """cProfile on the calling thread's CPU time, from `start()` to `stop()`, dumped to `path`."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.profile = cProfile.Profile(time.thread_time_ns, 1e-9) if path else None
        self.began = 0.0

    def start(self) -> None:
        if self.profile is not None:
            self.began = time.thread_time()
            self.profile.enable()

    def stop(self, steps: int) -> None:
        if self.profile is None or not self.began:
            return
        self.profile.disable()
        total = time.thread_time() - self.began
        assert self.path is not None
        self.profile.dump_stats(self.path)
        Path(self.path + ".json").write_text(json.dumps({"total_s": total, "steps": steps}))
        self.profile = None


# ---------------------------------------------------------------------------------- the figures
def _rates(marks: list[tuple[int, float, float]]) -> dict[str, float]:
    """marks: (step, wall s, rank 0 CPU s) every LOG_EVERY steps from `warmup` on → steps/s (median
    CHUNK-step window, wall) and CPU ms per step (over the whole span)."""
    chunked = [m for m in marks if m[0] % CHUNK == 0]
    pairs = list(zip(chunked, chunked[1:], strict=False))
    first, last = marks[0], marks[-1]
    return {
        "steps_s": statistics.median((b[0] - a[0]) / (b[1] - a[1]) for a, b in pairs),
        "cpu_ms": 1000 * (last[2] - first[2]) / (last[0] - first[0]),
    }


def job_spec(steps: int) -> dict:
    return {
        "name": "steady-bench",
        "model": {"name": "mlp", "args": {"in_features": IN_FEATURES, "hidden": HIDDEN, "num_classes": CLASSES}},
        "data": {
            "name": "synthetic",
            "args": {"num_samples": NUM_SAMPLES, "num_features": IN_FEATURES, "num_classes": CLASSES},
            "val_fraction": 0.0,
        },
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "batch_size": BATCH,
        "nproc": 2,
        "device": "cpu",
        "max_steps": steps,
        "log_every": LOG_EVERY,
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
    }


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(tree))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _torchrun(tree: Path, *args: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(Path(__file__).resolve()),
        *args,
    ]
    done = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _progress(events_path: Path) -> list[dict]:
    lines = events_path.read_text().splitlines() if events_path.exists() else []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event["type"] == "progress":
                out.append(event)
    return out


def run_bare(work: Path, steps: int, warmup: int, profile: str | None = None) -> dict[str, float]:
    result = work / "bare.json"
    args = ["--bare-worker", "--steps", str(steps), "--warmup", str(warmup), "--result", str(result)]
    _torchrun(REPO, *args, *(["--profile-to", profile] if profile else []))
    return _rates([tuple(m) for m in json.loads(result.read_text())])


def run_trainer(tree: Path, work: Path, steps: int, warmup: int, profile: str | None = None) -> dict[str, float]:
    spec_path, run_dir = work / "spec.json", work / f"run_{time.monotonic_ns()}"
    spec_path.write_text(json.dumps(job_spec(steps)))
    args = ["--trainer-worker", "--spec", str(spec_path), "--run-dir", str(run_dir), "--warmup", str(warmup)]
    _torchrun(tree, *args, *(["--profile-to", profile] if profile else []))
    marks = [(e["step"], e["time"], e["cpu_s"]) for e in _progress(run_dir / "events.jsonl") if e["step"] >= warmup]
    return _rates(marks)


def run_service(tree: Path, work: Path, steps: int, warmup: int) -> dict[str, float]:
    """The job through `rankzero up` of `tree` (sandboxed ranks, the worker and the API beside them)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from idle_cpu import TICK, Up, tree_ticks  # bench/ is not a package: beside this file

    up = Up(tree, work, trainer_module=None)
    try:
        up.wait_ready()
        r = up.client.post("/jobs", json=job_spec(steps + 10 * CHUNK))  # it must outlast the window
        r.raise_for_status()
        job_id = r.json()["id"]
        events = work / "data" / "runs" / f"job_{job_id}" / "events.jsonl"
        _wait_step(events, warmup, up)
        rank0 = _rank_zero(tree_ticks(up.proc.pid))
        t0, c0 = time.time(), _ticks(rank0)
        _wait_step(events, steps, up)
        t1, c1 = time.time(), _ticks(rank0)
        _wait_step(events, steps + 2 * LOG_EVERY, up)  # the events after t1, to place it between two
        up.client.post(f"/jobs/{job_id}/cancel")
    finally:
        up.stop()
    progress = _progress(events)
    marks = [(e["step"], e["time"], 0.0) for e in progress if warmup <= e["step"] <= steps]
    rates = _rates(marks)
    rates["cpu_ms"] = 1000 * (c1 - c0) / TICK / (_step_at(progress, t1) - _step_at(progress, t0))
    return rates


def _wait_step(events: Path, step: int, up, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not (progress := _progress(events)) or progress[-1]["step"] < step:
        if time.monotonic() > deadline or up.proc.poll() is not None:
            raise TimeoutError(f"the service job did not reach step {step}: {(up.tmp / 'up.log').read_text()[-2000:]}")
        time.sleep(0.05)


def _rank_zero(pids) -> int:
    """The rank-0 process among `pids` (its environment says RANK=0 and it runs the trainer)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"RANK=0" in environ and b"trainer" in cmdline and b"torch.distributed.run" not in cmdline:
                return pid
    raise RuntimeError("no rank-0 trainer process under the worker")


def _ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _step_at(progress: list[dict], t: float) -> float:
    """The (fractional) step rank 0 was at wall time `t`, between the progress events around it."""
    for a, b in zip(progress, progress[1:], strict=False):
        if a["time"] <= t <= b["time"]:
            return a["step"] + (b["step"] - a["step"]) * (t - a["time"]) / max(b["time"] - a["time"], 1e-9)
    raise ValueError(f"no progress events around {t}")


# --------------------------------------------------------------------------- the step's breakdown
# (file suffix, function) → part of the step; a part's time is the cumulative time of its functions.
_MODULE, _OPTIM = "torch/nn/modules/module.py", "torch/optim/optimizer.py"
_LOADERS = "trainer/data/loaders.py"
PARTS: list[tuple[str, list[tuple[str, str]]]] = [
    ("forward + loss", [(_MODULE, "_wrapped_call_impl"), ("nn/functional.py", "cross_entropy")]),
    ("backward (waits for the all-reduce)", [("torch/_tensor.py", "backward")]),
    ("optimizer step + zero_grad", [(_OPTIM, "wrapper"), (_OPTIM, "zero_grad")]),
    ("lr schedule", [("torch/optim/lr_scheduler.py", "step")]),
    (
        "fetch the batch",
        [("torch/utils/data/dataloader.py", "__next__"), (_LOADERS, "__iter__"), (_LOADERS, "to_device")],
    ),
    (
        "loss reduce + log (every 10 steps)",
        [("bench/trainer_overhead.py", "_reduce_loss"), ("trainer/train.py", "_log")],
    ),
]


def breakdown(path: str) -> dict[str, float]:
    """µs per step of rank 0's training thread, by part of the step (the rest: the loop's own work)."""
    meta = json.loads(Path(path + ".json").read_text())
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    per_step = 1e6 / meta["steps"]
    out, parted = {}, 0.0
    for part, funcs in PARTS:
        seconds = sum(
            cum
            for (file, _, name), (_, _, _, cum, _) in stats.items()
            if any(file.endswith(suffix) and name == fn for suffix, fn in funcs)
        )
        out[part] = seconds * per_step
        parted += seconds
    out["the rest (the loop's own bookkeeping)"] = (meta["total_s"] - parted) * per_step
    out["total (training thread)"] = meta["total_s"] * per_step
    return out


# ---------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--repo", action="append", default=[], help="LABEL=PATH (repeatable); default: this checkout")
    parser.add_argument("--service", action="store_true", help="also run the job through `rankzero up` (sandboxed)")
    parser.add_argument("--profile", action="store_true", help="print a per-step breakdown (cProfile of rank 0)")
    parser.add_argument("--shape", help="the MLP's widths, e.g. 784-512-512-10 (the default) or 8-8-2")
    for hidden in ("--bare-worker", "--trainer-worker"):
        parser.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--result", "--spec", "--run-dir", "--profile-to"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        return bare_worker(args.steps, args.warmup, args.result, args.profile_to)
    if args.trainer_worker:
        return trainer_worker(args.spec, args.run_dir, args.warmup, args.profile_to)
    if args.shape:  # the ranks read it at import; so does this process, re-executed
        os.environ[SHAPE_ENV] = args.shape
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *_without_shape(sys.argv[1:])])
    if args.warmup % CHUNK or args.steps % CHUNK or args.steps - args.warmup < 2 * CHUNK:
        parser.error(f"--warmup and --steps must be multiples of {CHUNK}, at least {2 * CHUNK} steps apart")
    run_cases(args)


def run_cases(args: argparse.Namespace) -> None:
    """Every case, round by round; then the profiled runs; then the tables."""
    trees = [(label, Path(path).resolve()) for label, path in (r.split("=", 1) for r in args.repo)]
    trees = trees or [("this", REPO)]
    cases: list[tuple[str, object]] = [("bare", lambda w: run_bare(w, args.steps, args.warmup))]
    for label, tree in trees:
        cases.append((f"trainer@{label}", lambda w, t=tree: run_trainer(t, w, args.steps, args.warmup)))
    if args.service:  # the last tree's only: a service run takes minutes on a loaded 2-core machine
        label, tree = trees[-1]
        cases.append((f"service@{label}", lambda w: run_service(tree, w, args.steps, args.warmup)))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in cases}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="rankzero-steady-") as tmp:
        for r in range(args.rounds):
            for name, run in cases:
                work = Path(tmp) / f"{name}-{r}".replace("@", "-")
                work.mkdir()
                results[name].append(run(work))  # type: ignore[operator]
                print(f"round {r + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
            loads.append(os.getloadavg()[0])
        parts = {}
        if args.profile:
            parts["bare"] = _profiled(lambda p: run_bare(Path(tmp), args.steps, args.warmup, p), tmp, "bare")
            for label, tree in trees:
                work = Path(tmp) / f"profile-{label}"
                work.mkdir()
                parts[f"trainer@{label}"] = _profiled(
                    lambda p, t=tree, w=work: run_trainer(t, w, args.steps, args.warmup, p), tmp, label
                )
    print_tables(args, results, parts, loads)


def _without_shape(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--shape="):
            skip = False
            continue
        if a == "--shape":
            skip = True
            continue
        out.append(a)
    return out


def _profiled(run, tmp: str, label: str) -> dict[str, float]:
    path = str(Path(tmp) / f"profile-{label}.prof")
    run(path)
    return breakdown(path)


def print_tables(args, results: dict[str, list[dict[str, float]]], parts: dict, loads: list[float]) -> None:
    hidden = "-".join(str(h) for h in HIDDEN)
    print(
        f"\nMLP {IN_FEATURES}-{hidden}-{CLASSES}, batch {BATCH}/rank, 2 ranks, gloo, CPU; loss reduced every "
        f"{LOG_EVERY} steps; steps {args.warmup}..{args.steps}; {args.rounds} alternating rounds; "
        f"load average {min(loads):.1f}–{max(loads):.1f}\n"
    )
    bare = results["bare"]
    print("| case | steps/s, median (runs) | ÷ bare, median (per round) | CPU ms/step, median (runs) | ÷ bare |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        s = [r["steps_s"] for r in runs]
        c = [r["cpu_ms"] for r in runs]
        per_round = ", ".join(f"{r['steps_s'] / b['steps_s']:.2f}" for r, b in zip(runs, bare, strict=True))
        ratio = statistics.median(s) / statistics.median(r["steps_s"] for r in bare)
        cpu_ratio = statistics.median(r["cpu_ms"] for r in bare) / statistics.median(c)
        print(
            f"| {name} | {statistics.median(s):.1f} ({', '.join(f'{v:.1f}' for v in s)}) "
            f"| {ratio:.3f} ({per_round}) | {statistics.median(c):.2f} ({', '.join(f'{v:.2f}' for v in c)}) "
            f"| {cpu_ratio:.3f} |"
        )
    print("\nsteps/s: rank 0's median 100-step window (wall clock). CPU ms/step: rank 0's process CPU time")
    print("(all its threads) per step over the same steps, which a loaded machine disturbs far less;")
    print("its ratio is bare's CPU ÷ the case's, so above 1 means cheaper than the bare loop. Target ≥ 0.98.")
    if parts:
        names = list(parts)
        print("\nPer-step breakdown of rank 0's training thread (cProfile, thread CPU time, µs per step):\n")
        print(f"| part | {' | '.join(names)} |")
        print(f"|---|{'---|' * len(names)}")
        for part in next(iter(parts.values())):
            print(f"| {part} | {' | '.join(f'{parts[n][part]:,.0f}' for n in names)} |")


if __name__ == "__main__":
    main()
