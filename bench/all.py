"""Every figure of issue 29 in one command, each beside its baseline measured in the same run.

    .venv/bin/python bench/all.py [--quick] [--base PATH] [--only NAME ...]
    make bench          # the same, full length

`--base PATH`: another code tree to measure beside this one where a bench compares trees (worker and
idle CPU, ingest), e.g. today's committed code: `git archive HEAD | tar -x -C /tmp/base`.
Without it the baselines are the ones each bench measures itself (the bare torchrun loop, an empty
Python start, the full placement pass).

The figures, and the bench that measures each (run any of them alone for its details):

| name | figure | baseline | bench |
|---|---|---|---|
| cli | CPU of `rankzero --help` and `import cli.main` | an empty `python -c pass` | here |
| steady | steps/s of a 2-rank DDP job through the trainer | the bare torchrun loop | trainer_overhead.py |
| worker | the worker's CPU while a 2-rank job runs | `--base` | worker_cpu.py |
| idle | idle `rankzero up` CPU; submit → claim / running | `--base` | idle_cpu.py |
| scheduler | one placement pass; submit → first step | the previous pass, bare torchrun | scheduler.py |
| ingest | metric points/s into SQLite and PostgreSQL | `--base` | service.py --ingest-only |

Each bench prints its own table; this script runs them one after another (a shared machine: they
would disturb each other) and prints every table under one heading, then how long each took.
CPU time is what the CPU figures measure, not wall time, so neighbours slow them less.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PY = sys.executable


def _child_cpu(cmd: list[str], cwd: Path) -> float:
    """CPU seconds (user + system) of one run of `cmd` (a child: RUSAGE_CHILDREN grows by exactly it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=_env(cwd))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env["PYTHONPATH"] = str(repo)
    return env


def cli_table(quick: bool, base: Path | None) -> str:
    """`rankzero --help` and `import cli.main`, CPU seconds (median of alternating runs), beside `python -c pass`."""
    repeats = 3 if quick else 9
    cases = {
        "python -c pass (the floor)": [PY, "-c", "pass"],
        "import cli.main": [PY, "-c", "import cli.main"],
        "rankzero --help": [PY, "-m", "cli.main", "--help"],
    }
    trees = [("this", ROOT)] + ([("base", base)] if base else [])
    cpu: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):  # alternating: drifting load hits every case alike
        for label, tree in trees:
            for name, cmd in cases.items():
                cpu.setdefault((label, name), []).append(_child_cpu(cmd, tree))
    lines = ["| code | start | CPU s, median | over the floor | target |", "|---|---|---|---|---|"]
    for label, _ in trees:
        floor = statistics.median(cpu[(label, "python -c pass (the floor)")])
        for name in cases:
            med = statistics.median(cpu[(label, name)])
            verdict = "" if name.startswith("python") else ("≤ 0.3 s: pass" if med <= 0.3 else "≤ 0.3 s: FAIL")
            lines.append(f"| {label} | {name} | {med:.3f} | +{med - floor:.3f} | {verdict} |")
    return "\n".join(lines)


def _bench(script: str, args: list[str]) -> str:
    out = subprocess.run([PY, str(BENCH / script), *args], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        return f"**{script} failed** (exit {out.returncode}):\n\n```\n{out.stderr[-2000:]}\n```"
    return out.stdout.strip()


def benches(quick: bool, base: Path | None) -> dict[str, tuple[str, object]]:
    """name → (title, a thunk that returns the table)."""
    repos = ["--repo", f"base={base}", "--repo", f"this={ROOT}"] if base else []
    steady = ["--rounds", "1", "--steps", "600", "--warmup", "100"] if quick else []
    idle = ["--idle-s", "30", "--jobs", "2", *repos] if quick else ["--idle-s", "90", *repos]
    return {
        "cli": ("CLI start (CPU time)", lambda: cli_table(quick, base)),
        "steady": (
            "steady state: trainer vs the bare torchrun loop",
            lambda: _bench("trainer_overhead.py", steady),
        ),
        "worker": (
            "the worker's CPU while a 2-rank job runs",
            lambda: _bench("worker_cpu.py", ["--window-s", "30" if quick else "60", *repos]),
        ),
        "idle": (
            "idle `rankzero up`, submit → start",
            lambda: _bench("idle_cpu.py", idle),
        ),
        "scheduler": (
            "placement pass and submit → first step",
            lambda: _bench("scheduler.py", ["--jobs", "1000", "--hosts", "50", "--starts", "1"] if quick else []),
        ),
        "ingest": (
            "metric ingest",
            lambda: _bench("service.py", ["--ingest-only", *(["--quick"] if quick else []),
                                          *(["--baseline", str(base)] if base else [])]),
        ),
    }  # fmt: skip


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shorter runs, fewer rounds (minutes, not tens of them)")
    p.add_argument("--base", type=Path, help="a baseline code tree, measured beside this one where a bench can")
    p.add_argument("--only", action="append", default=[], help="run only these figures (repeatable): "
                   "cli, steady, worker, idle, scheduler, ingest")  # fmt: skip
    args = p.parse_args(argv)
    base = args.base.resolve() if args.base else None
    if base is not None and not (base / "cli" / "main.py").is_file():
        p.error(f"--base {base}: not a rankzero tree (no cli/main.py)")
    todo = benches(args.quick, base)
    unknown = set(args.only) - set(todo)
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}; choose from {sorted(todo)}")
    took = {}
    print(f"# rankzero benchmarks{' (--quick)' if args.quick else ''}; baseline tree: {base or 'none'}\n")
    for name, (title, run) in todo.items():
        if args.only and name not in args.only:
            continue
        start = time.monotonic()
        table = run()  # type: ignore[operator]
        took[name] = time.monotonic() - start
        print(f"## {name}: {title}\n\n{table}\n", flush=True)
    print("bench wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
