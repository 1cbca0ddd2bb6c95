"""What the job sandbox costs (issue 19): launch → first step, and steps/s, with and without it.

    .venv/bin/python bench/sandbox.py [--rounds 3] [--steps 400] [--nproc 1]

Each run is one attempt of the built-in trainer (mlp on synthetic data, CPU, gloo), started exactly
as the supervisor starts it (worker/launch.py `launch`), sandboxed (RANKZERO_SANDBOX=on: bubblewrap
namespaces + a cgroup) and not (off), alternating on / off / on / off ... in one invocation so drifting
machine load hits both alike. "First step" is the time from the call to launch() to the first
`progress` event's stamp (the submit → claim part before it is the same either way: the scheduler and
claim do not change); steps/s is taken from the progress events between the first and the last.
Prints each run, the medians and the ratios sandboxed / not, and the sandbox's fixed cost alone
(`true` started in it vs directly, alternating, median of 20).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.settings import Settings
from trainer.run_dir import RunDir
from worker import sandbox
from worker.launch import launch


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
    }


def one_run(root: Path, job_id: int, mode: str, steps: int, nproc: int) -> tuple[float, float]:
    settings = Settings.model_validate({"data_dir": root / "data", "sandbox": mode})
    run = RunDir(settings.resolved_runs_dir / f"job_{job_id}")
    t0 = time.time()
    launched = launch(run, _spec(steps, nproc), job_id, 1, nproc, None, settings)
    code = launched.proc.wait(timeout=1800)
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


def spawn_cost(times: int = 20) -> tuple[float, float]:
    """Median seconds to run `true` in a sandbox as launch builds it (namespaces + mounts) vs directly:
    the fixed cost every attempt pays once, free of the trainer's noisy start-up."""
    import subprocess

    view = sandbox.View(run_dir=Path(tempfile.gettempdir()), cwd=Path("/"), system=sandbox.system_dirs(),
                        runtime_dirs=sandbox.runtime_dirs(""))  # fmt: skip
    boxed = [sandbox.shutil.which("bwrap") or "bwrap", *sandbox.bwrap_args(view), "true"]
    took: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(times):
        for mode, cmd in (("on", boxed), ("off", ["true"])):
            t = time.perf_counter()
            subprocess.run(cmd, check=True)
            took[mode].append(time.perf_counter() - t)
    return statistics.median(took["on"]), statistics.median(took["off"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--nproc", type=int, default=1)
    args = parser.parse_args()
    why = sandbox.probe()
    if why is not None:
        raise SystemExit(f"no sandbox on this host: {why}")
    results: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="rz-bench-sandbox-") as tmp:
        job = 0
        for r in range(args.rounds):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                job += 1
                first, rate = one_run(Path(tmp), job, mode, args.steps, args.nproc)
                results[mode].append((first, rate))
                print(f"round {r + 1} sandbox {mode:>3}: first step {first:6.2f} s   {rate:8.1f} steps/s", flush=True)
    med = {m: (statistics.median(f for f, _ in v), statistics.median(s for _, s in v)) for m, v in results.items()}
    print()
    print(f"{'':12}{'first step (s)':>16}{'steps/s':>12}")
    for mode in ("on", "off"):
        print(f"sandbox {mode:<4}{med[mode][0]:>16.2f}{med[mode][1]:>12.1f}")
    print(f"ratio on/off{med['on'][0] / med['off'][0]:>16.3f}{med['on'][1] / med['off'][1]:>12.3f}")
    on, off = spawn_cost()
    print(f"\nstarting a process: {on * 1000:.1f} ms in the sandbox, {off * 1000:.1f} ms without (median of 20)")


if __name__ == "__main__":
    main()
