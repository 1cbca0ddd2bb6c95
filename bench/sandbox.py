"""What the job sandbox costs: issue 34's sandbox (a non-root job, the seccomp filter, read-only /proc/sys and
root, sized tmpfs, a default memory limit, a filesystem of the disk limit's size over the run dir) against the
same sandbox with the disk limit sampled instead ("sampled": what a non-root worker or a host without loop
devices gets), the sandbox before issue 34 ("legacy": namespaces, a cgroup, the job as the worker's uid), side by
side in one run; and each against no sandbox.

    .venv/bin/python bench/sandbox.py [--rounds 3] [--steps 400] [--nproc 2] [--run-dir-mb 0]

`--run-dir-mb N`: each run dir holds an N MiB checkpoint of an earlier attempt before the launch (the new
sandbox copies it into the attempt's filesystem). Every run's spec has `disk_limit_mb` 4,096.

Each run is one attempt of the built-in trainer (mlp on synthetic data, CPU; `--nproc 2`: a real 2-rank gloo
DDP job, so torch's import and gloo's sockets run under the filter), started exactly as the supervisor starts
it (worker/launch.py `launch`), in the order new / legacy / off, rotated every round so drifting machine load
hits all alike. "First step" is the time from the call to launch() to the first `progress` event's stamp;
steps/s is taken from the progress events between the first and the last. Then the sandbox's fixed cost
alone: `true` started in each sandbox vs directly, alternating, median of 20; and the disk filesystem's own
cost: making, filling (the run dir's contents) and mounting it, then copying back and unmounting, median of 5.

The legacy sandbox is rebuilt here (`legacy_prepare`, swapped in for worker.sandbox.prepare while a legacy
run starts): the worker itself has no switch back to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.settings import Settings
from trainer.run_dir import RunDir
from worker import sandbox, sandbox_cgroup, sandbox_disk, sandbox_limits, sandbox_seccomp
from worker.launch import launch

MODES = ("new", "sampled", "legacy", "off")
DISK_LIMIT_MB = 4096


def legacy_args(view: sandbox.View) -> list[str]:
    """bwrap's options as worker/sandbox.py built them before issue 34."""
    args = ["--as-pid-1", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += [] if view.host_network else ["--unshare-net"]
    args += [] if view.as_root else ["--unshare-user"]
    args += ["--cap-drop", "ALL"]
    shown: list[Path] = []
    for path, target in view.system:
        args += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
        shown += [Path(path)] if target is None else []
    for path, is_dir in view.masked:
        args += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys", "--tmpfs", sandbox.SANDBOX_TMP]
    for d in view.runtime_dirs:
        args += ["--ro-bind", str(d), str(d)]
        shown.append(d)
    args += [a for h in view.hidden if any(sandbox._under(h, s) for s in shown) for a in ("--tmpfs", str(h))]
    args += [a for dev in view.devices for a in ("--dev-bind", str(dev), str(dev))]
    if view.datasets_dir is not None:
        args += ["--ro-bind", str(view.datasets_dir), str(view.datasets_dir)]
    args += [a for root in view.dataset_roots for a in ("--ro-bind-try", str(root), str(root))]
    if view.code_dir is not None:
        args += ["--ro-bind", str(view.code_dir), str(view.code_dir)]
    args += [a for fd, f in view.input_fds for a in ("--ro-bind-fd", str(fd), str(f))]
    if view.environment_dir is not None:
        args += ["--ro-bind", str(view.environment_dir), str(view.environment_dir)]
    return [*args, "--bind", str(view.run_dir), str(view.run_dir), "--chdir", str(view.cwd)]


def legacy_prepare(view: sandbox.View, mark: str, memory_limit_mb: int | None, pids_max: int, **_: object):
    """worker/sandbox.py's prepare before issue 34: no filter, no ids switch, no default memory limit."""
    layout = sandbox.cgroups()
    cgroup = sandbox_cgroup.create(layout, mark, memory_limit_mb, pids_max) if layout is not None else None
    read, write = os.pipe()
    return sandbox.Prepared(mark, [shutil.which("bwrap") or "bwrap", *legacy_args(view)], cgroup, read, write)


@contextmanager
def profile(mode: str):
    real, can_mount = sandbox.prepare, sandbox_disk.host_can_mount
    if mode == "legacy":
        sandbox.prepare = legacy_prepare  # type: ignore[assignment]
    if mode == "sampled":  # as on a host without loop devices: the new sandbox, the disk limit sampled
        sandbox_disk.host_can_mount = lambda: (False, True)
    try:
        yield
    finally:
        sandbox.prepare, sandbox_disk.host_can_mount = real, can_mount


def _spec(steps: int, nproc: int) -> dict:
    return {
        "name": "bench-sandbox",
        "model": {"name": "mlp", "args": {"in_features": 32, "hidden": [64], "num_classes": 4}},
        "data": {"name": "synthetic", "args": {"num_samples": 4096, "num_features": 32, "num_classes": 4}},
        "batch_size": 32,
        "nproc": nproc,
        "device": "cpu",
        "max_steps": steps,
        "checkpoint": {"every_epochs": None},
        "disk_limit_mb": DISK_LIMIT_MB,
    }


def _earlier_checkpoint(run: RunDir, mb: int) -> None:
    if mb > 0:
        run.checkpoints.mkdir(parents=True, exist_ok=True)
        with open(run.checkpoints / "step_00000001.pt.earlier", "wb") as fh:
            for _ in range(mb):
                fh.write(os.urandom(2**20))


def one_run(root: Path, job_id: int, mode: str, steps: int, nproc: int, run_dir_mb: int) -> tuple[float, float]:
    settings = Settings.model_validate({"data_dir": root / "data", "sandbox": "off" if mode == "off" else "on"})
    run = RunDir(settings.resolved_runs_dir / f"job_{job_id}")
    _earlier_checkpoint(run, run_dir_mb)
    t0 = time.time()
    with profile(mode):
        launched = launch(run, _spec(steps, nproc), job_id, 1, nproc, None, settings)
    code = launched.proc.wait(timeout=1800)
    sandbox_disk.wait_released(launched.mark, 600)
    if code != 0:
        raise SystemExit(f"{mode} run failed ({code}): {launched.launcher_log.read_text()[-2000:]}")
    progress = [
        e
        for e in (json.loads(line) for line in run.events.read_text().splitlines() if line.strip())
        if e.get("type") == "progress"
    ]
    first, last = progress[0], progress[-1]
    rate = (last["step"] - first["step"]) / max(last["time"] - first["time"], 1e-9)
    return first["time"] - t0, rate


def spawn_cost(times: int = 20) -> dict[str, float]:
    """Median seconds to run `true` in each sandbox as prepare builds it vs directly: the fixed cost every
    attempt pays once (the new one's includes writing the filter to a memfd and bwrap loading it)."""
    settings = Settings.model_validate({})
    root = os.geteuid() == 0
    view = sandbox.View(run_dir=Path(tempfile.gettempdir()), cwd=Path("/"), system=sandbox.system_dirs(),
                        runtime_dirs=sandbox.runtime_dirs(""), as_root=root)  # fmt: skip
    ids = (settings.sandbox_uid, settings.sandbox_gid) if root else None
    new_view = sandbox.View(
        **{**view.__dict__, "run_as": ids, "tmp_bytes": 2**30, "proc_masked": sandbox.proc_masked()}
    )
    bwrap = shutil.which("bwrap") or "bwrap"
    took: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(times):
        for mode in MODES:
            t = time.perf_counter()
            if mode == "new":
                fd = sandbox_seccomp.memfd()
                subprocess.run([bwrap, "--seccomp", str(fd), *sandbox.bwrap_args(new_view), "true"], check=True,
                               pass_fds=(fd,), preexec_fn=sandbox.bwrap_umask)  # fmt: skip
                os.close(fd)
            elif mode == "legacy":
                subprocess.run([bwrap, *legacy_args(view), "true"], check=True)
            else:
                subprocess.run(["true"], check=True)
            took[mode].append(time.perf_counter() - t)
    took["sampled"] = took["new"]  # the same bwrap: the disk differs only at the attempt's start and end
    return {m: statistics.median(v) for m, v in took.items()}


def disk_cost(run_dir_mb: int, times: int = 5) -> tuple[float, float] | None:
    """Median seconds of the disk filesystem's start (make, copy the run dir in, mount) and end (copy back,
    unmount, delete) for a run dir holding `run_dir_mb` MiB; None where this host cannot mount one."""
    if os.geteuid() != 0 or not all(sandbox_disk.host_can_mount()):
        return None
    starts, ends = [], []
    with tempfile.TemporaryDirectory(prefix="rz-bench-disk-") as tmp:
        runs = Path(tmp) / "runs"
        run = RunDir(runs / "job_1")
        run.root.mkdir(parents=True)
        _earlier_checkpoint(run, run_dir_mb)
        for i in range(times):
            t = time.perf_counter()
            disk = sandbox_disk.AttemptDisk.mount(run.root, runs, f"bench-{i}", DISK_LIMIT_MB)
            starts.append(time.perf_counter() - t)
            (run.root / "new.bin").write_bytes(os.urandom(2**20))  # what an attempt adds
            t = time.perf_counter()
            disk.unmount()
            ends.append(time.perf_counter() - t)
    return statistics.median(starts), statistics.median(ends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--run-dir-mb", type=int, default=0)
    args = parser.parse_args()
    why = sandbox.probe()
    if why is not None:
        raise SystemExit(f"no sandbox on this host: {why}")
    ceiling = sandbox_limits.ceiling_mb(
        sandbox_limits.host_memory_mb(), Settings.model_validate({}).job_memory_fraction
    )
    print(f"worker euid {os.geteuid()}; a job's memory limit by default {ceiling:,} MiB", flush=True)
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="rz-bench-sandbox-") as tmp:
        job = 0
        for r in range(args.rounds):
            for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                job += 1
                first, rate = one_run(Path(tmp), job, mode, args.steps, args.nproc, args.run_dir_mb)
                results[mode].append((first, rate))
                print(f"round {r + 1} {mode:>6}: first step {first:6.2f} s   {rate:8.1f} steps/s", flush=True)
    med = {m: (statistics.median(f for f, _ in v), statistics.median(s for _, s in v)) for m, v in results.items()}
    spawn = spawn_cost()
    print()
    print(f"{'sandbox':<22}{'first step (s)':>16}{'steps/s':>12}{'start `true` (ms)':>20}")
    for mode in MODES:
        print(f"{mode:<22}{med[mode][0]:>16.2f}{med[mode][1]:>12.1f}{spawn[mode] * 1000:>20.1f}")
    for a, b in (("new", "sampled"), ("new", "legacy"), ("new", "off"), ("legacy", "off")):
        print(f"{'ratio ' + a + '/' + b:<22}{med[a][0] / med[b][0]:>16.3f}{med[a][1] / med[b][1]:>12.3f}"
              f"{spawn[a] / spawn[b]:>20.2f}")  # fmt: skip
    for mb in sorted({0, args.run_dir_mb}):
        cost = disk_cost(mb)
        said = (
            "no filesystem on this host"
            if cost is None
            else f"start {cost[0] * 1000:.0f} ms, end {cost[1] * 1000:.0f} ms"
        )
        print(f"disk filesystem ({DISK_LIMIT_MB:,} MiB limit), run dir holding {mb} MiB: {said}")


if __name__ == "__main__":
    main()
