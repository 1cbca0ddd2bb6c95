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
| cli | CPU of every command's start (each `--help`, real commands on an API) | an empty `python -c pass` | here |
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


def _cli_env(tree: Path, tmp: Path) -> dict[str, str]:
    """A user's local environment: the instance found through RANKZERO_DATA_DIR; bytecode cached as in an
    installed CLI (this machine sets PYTHONDONTWRITEBYTECODE: every start would compile the CLI's modules)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_") and k != "PYTHONDONTWRITEBYTECODE"}
    pyc = tmp / "pyc" / str(tree).strip("/").replace("/", "_")
    return env | {"PYTHONPATH": str(tree), "RANKZERO_DATA_DIR": str(tmp / "data"), "COLUMNS": "100",
                  "PYTHONPYCACHEPREFIX": str(pyc), "XDG_CACHE_HOME": str(tmp / "cache")}  # fmt: skip


def _cli_cpu(cmd: list[str], tree: Path, tmp: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, cwd=tree, env=_cli_env(tree, tmp), capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])} exited {out.returncode}: {out.stderr[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cli_api(tmp: Path) -> subprocess.Popen[bytes]:
    """This tree's `rankzero api` on a free port (its data dir records where), answering, with job 1 queued."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _cli_env(ROOT, tmp)
    api = subprocess.Popen([PY, "-m", "cli.main", "api", "--port", str(port)], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                break
        except OSError:
            if api.poll() is not None or time.monotonic() > deadline:
                api.kill()
                raise RuntimeError(f"the API did not start (exit {api.poll()})") from None
            time.sleep(0.3)
    subprocess.run([PY, "-m", "cli.main", "submit", str(tmp / "job.yaml")], cwd=ROOT, env=env, check=True,
                   capture_output=True)  # fmt: skip
    return api


def _cli_cases(tmp: Path) -> dict[str, list[str]]:
    """name → argv: the floor, the import, `--help`, every `CMD --help` (listed by the app), real commands."""
    import json

    listed = subprocess.run([PY, "-c", "import json, typer.main, cli.main as m\n"
                             "g = typer.main.get_command(m.app)\n"
                             "print(json.dumps([[n, *s] for n, c in g.commands.items()\n"
                             "  for s in ([[]] + [[x] for x in getattr(c, 'commands', {})])]))"],
                            cwd=ROOT, env=_cli_env(ROOT, tmp), capture_output=True, text=True, check=True)  # fmt: skip
    rz = [PY, "-m", "cli.main"]
    code = [*rz, "submit", "--code", str(tmp / "code"), str(tmp / "script.yaml")]
    return {
        "python -c pass (the floor)": [PY, "-c", "pass"],
        "import cli.main": [PY, "-c", "import cli.main"],
        "rankzero --help": [*rz, "--help"],
        **{f"rankzero {' '.join(c)} --help": [*rz, *c, "--help"] for c in json.loads(listed.stdout)},
        "rankzero jobs": [*rz, "jobs"],
        "rankzero show 1": [*rz, "show", "1"],
        "rankzero logs 1": [*rz, "logs", "1"],
        "rankzero metrics 1": [*rz, "metrics", "1"],
        "rankzero hosts": [*rz, "hosts"],
        "rankzero submit SPEC": [*rz, "submit", str(tmp / "job.yaml")],
        "rankzero submit --code DIR SPEC (packs, uploads)": code,
    }


def _cli_rows(med: dict[tuple[str, str], float], cases: list[str], labels: list[str]) -> list[tuple[str, dict]]:
    """One row per case, every `CMD --help` folded into its median and its worst."""
    helps = [n for n in cases if n.endswith(" --help") and n != "rankzero --help"]
    worst = max(helps, key=lambda n: med[("this", n)])
    rows: list[tuple[str, dict]] = []
    for name in (n for n in cases if n not in helps):
        rows.append((name, {label: med[(label, name)] for label in labels}))
        if name == "rankzero --help":
            rows.append(
                (
                    f"every `rankzero CMD --help` ({len(helps)}): median",
                    {label: statistics.median(med[(label, n)] for n in helps) for label in labels},
                )
            )
            rows.append((f"every `rankzero CMD --help`: worst ({worst.removeprefix('rankzero ')})",
                         {label: med[(label, worst)] for label in labels}))  # fmt: skip
    return rows


def cli_table(quick: bool, base: Path | None) -> str:
    """Every command's start, CPU seconds of the child (median of alternating runs), beside `python -c pass`:
    importing the CLI, `rankzero --help`, every `rankzero CMD --help`, and real commands against a running
    API (`jobs`, `show`, `logs`, `metrics`, `hosts`, `submit SPEC`, `submit --code`), found as a user's local
    commands find it (RANKZERO_DATA_DIR). With --base, that tree's CLI runs beside this one's."""
    import tempfile

    repeats = 3 if quick else 7
    trees = [("this", ROOT)] + ([("base", base)] if base else [])
    cpu: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-cli-") as t:
        tmp = Path(t)
        (tmp / "code").mkdir()
        (tmp / "code" / "train.py").write_text("print('hi')\n")
        (tmp / "job.yaml").write_text("name: bench-cli\nmodel: {name: mlp}\ndata: {name: digits}\nmax_steps: 5\n")
        (tmp / "script.yaml").write_text("name: bench-cli-script\nentrypoint: train.py\n")
        api = _cli_api(tmp)
        try:
            cases = _cli_cases(tmp)
            missing = []
            for name, cmd in list(cases.items()):  # a first run compiles and caches the bytecode, as an install
                for _, tree in trees:
                    try:
                        _cli_cpu(cmd, tree, tmp)
                    except RuntimeError:  # a command the base tree does not have yet
                        if tree == ROOT:
                            raise
                        missing.append(name.removeprefix("rankzero "))
                        del cases[name]
                        break
            for _ in range(repeats):  # alternating: drifting load hits every case and tree alike
                for name, cmd in cases.items():
                    for label, tree in trees:
                        cpu.setdefault((label, name), []).append(_cli_cpu(cmd, tree, tmp))
        finally:
            api.terminate()
            api.wait(30)
    med = {key: statistics.median(v) for key, v in cpu.items()}
    labels = [label for label, _ in trees]
    floor = med[("this", "python -c pass (the floor)")]
    lines = ["| start | " + " | ".join(f"{label} CPU s" for label in labels) + (" | this ÷ base" if base else "")
             + " | this over the floor | target |", "|---" * (len(labels) + (4 if base else 3)) + "|"]  # fmt: skip
    for name, by in _cli_rows(med, list(cases), labels):
        ratio = f" | {by['this'] / by['base']:.2f}" if base else ""
        verdict = "" if name.startswith("python") else ("≤ 0.3 s: pass" if by["this"] <= 0.3 else "≤ 0.3 s: FAIL")
        lines.append(f"| {name} | {' | '.join(f'{by[label]:.3f}' for label in labels)}{ratio} "
                     f"| +{by['this'] - floor:.3f} | {verdict} |")  # fmt: skip
    if missing:
        lines.append(f"\nNot in the base tree, so left out: {', '.join(missing)}.")
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
