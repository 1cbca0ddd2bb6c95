"""The Slurm backend's costs (issue 26): run with `.venv/bin/python -m bench.slurm_overhead` as root (it starts
a private Slurm with tests/slurm/cluster.py, installing slurm-wlm with apt where missing).

1. submit → first training step: the same one-rank digits job through rankzero (a queued row, the agent's
   period, its batch script, `srun python -m worker.slurm.rank`) and as a bare `sbatch` of a hand-written
   script (`srun python -m trainer`, RANK etc. set by hand). Both are timed to the first `progress` event of
   events.jsonl; the difference is rankzero's overhead (target ≤ +1 s).
2. the agent's polling cost with 1,000 active Slurm jobs: one period's `squeue` parse, the state mapping of
   every job, and the one heartbeat UPDATE, measured on 1,000 rows of a SQLite database with a stand-in
   `squeue` answer (the real `squeue` call is one process whatever the count; its own time is printed for
   this cluster's jobs).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEC = {"name": "bench", "nproc": 1, "max_steps": 5, "batch_size": 16, "device": "cpu", "log_every": 1,
        "data": {"name": "digits"}, "model": {"name": "mlp"}}  # fmt: skip
TOKEN = "bench-token-" + "x" * 40


def first_progress(events: Path, since: float, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists():
            for line in events.read_text().splitlines():
                if '"progress"' in line or '"metric"' in line:
                    return time.monotonic() - since
        time.sleep(0.05)
    raise TimeoutError(f"no progress event in {events}")


def bare(cluster_env: dict[str, str], root: Path) -> float:
    run = root / "bare"
    run.mkdir(parents=True)
    port = 29811 + len(str(root))  # the second run's own port (its folder name is longer)
    (run / "spec.json").write_text(json.dumps(SPEC))
    script = run / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N 1 --ntasks-per-node=1 --output=" + str(run / "out.log") + "\n"
        f"export PYTHONPATH={ROOT} OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT={port}\n"
        f"srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec {sys.executable} "
        f"-m trainer --spec {run / 'spec.json'} --run-dir {run}'\n"
    )
    import subprocess

    t0 = time.monotonic()
    subprocess.run(["sbatch", "--parsable", str(script)], env=cluster_env, check=True, capture_output=True)
    return first_progress(run / "events.jsonl", t0)


def through_rankzero(cluster_env: dict[str, str], root: Path) -> float:
    os.environ.update({"SLURM_CONF": cluster_env["SLURM_CONF"], "OMP_NUM_THREADS": "1"})
    from sqlmodel import Session

    from core import jobs
    from core.db import get_engine
    from core.migrate import upgrade
    from core.settings import Settings
    from worker.slurm.agent import Agent
    from worker.slurm.commands import Runner

    url = f"sqlite:///{root / 'rz.db'}"
    values = {"data_dir": root / "data", "runs_dir": root / "runs", "database_url": url, "api_token": TOKEN,
              "slurm_pool": "bench", "slurm_poll_s": 0.2}  # fmt: skip
    settings = Settings(**values)
    upgrade(url)
    agent = Agent(get_engine(url), settings, Runner(env=cluster_env))
    t0 = time.monotonic()
    with Session(agent.engine) as s:
        job_id = jobs.create(s, "bench", SPEC, "bench").id
    assert job_id is not None
    events = settings.resolved_runs_dir / f"job_{job_id}" / "events.jsonl"
    while not events.exists() or '"progress"' not in events.read_text():
        agent.step()
        time.sleep(settings.slurm_poll_s)
    return time.monotonic() - t0


def polling_cost(root: Path, n: int = 1000) -> dict[str, float]:
    from sqlalchemy import insert

    from core.db import get_engine
    from core.migrate import upgrade
    from core.tables import Job, JobStatus
    from worker.slurm import rows
    from worker.slurm.commands import parse_squeue
    from worker.slurm.states import read, status_of

    url = f"sqlite:///{root / 'poll.db'}"
    upgrade(url)
    engine = get_engine(url)
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        conn.execute(insert(Job), [
            {"name": f"j{i}", "spec": {}, "status": JobStatus.running, "queue": "p", "attempt": 1, "created_at": now,
             "backend_job_id": str(1000 + i), "backend_first_attempt": 1} for i in range(n)
        ])  # fmt: skip
    text = "".join(f"{1000 + i}|RUNNING|None|n{i % 64}|gpu|0|2026-11-25T20:00:00|0|\n" for i in range(n))
    t0 = time.perf_counter()
    live = rows.live(engine, "p")
    t1 = time.perf_counter()
    seen = parse_squeue(text)
    readings = [read(seen.get(r.backend_job_id or ""), 1, False) for r in live]
    t2 = time.perf_counter()
    rows.heartbeat(engine, [r.job_id for r in live])
    t3 = time.perf_counter()
    assert len(readings) == n
    # The job page's partition / nodes / state (rows.set_shown): written only when they change, in one transaction
    # a period. A period where every job changed at once (1,000 jobs start together), then a steady one (none).
    jobs_seen = [(r, seen[r.backend_job_id or ""], g) for r, g in zip(live, readings, strict=True)]
    t4 = time.perf_counter()
    rows.set_shown(engine, [(r.job_id, r.attempt, status_of(job, reading)) for r, job, reading in jobs_seen])
    t5 = time.perf_counter()
    again = rows.live(engine, "p")
    t6 = time.perf_counter()
    changed = [r for r, (_, job, reading) in zip(again, jobs_seen, strict=True)
               if r.shown is None or r.shown.columns() != status_of(job, reading).columns()]  # fmt: skip
    t7 = time.perf_counter()
    assert not changed
    return {"read_rows_s": t1 - t0, "parse_and_map_s": t2 - t1, "heartbeat_update_s": t3 - t2, "total_s": t3 - t0,
            "shown_all_changed_s": t5 - t4, "read_rows_with_shown_s": t6 - t5, "shown_steady_s": t7 - t6}  # fmt: skip


def main() -> None:
    from tests.slurm import cluster

    reason = cluster.install_reason()
    if reason:
        sys.exit(reason)
    root = Path(tempfile.mkdtemp(prefix="rankzero-slurm-bench-"))
    root.chmod(0o755)
    running = cluster.start(root / "slurm")
    try:
        env = running.env
        # bare, rankzero, bare again: the first run warms the file cache (torch's files); the faster bare counts.
        b = bare(env, root)
        r = through_rankzero(env, root)
        b = min(b, bare(env, root / "again"))
        print(f"submit → first step: bare sbatch {b:.2f} s, through rankzero {r:.2f} s, overhead {r - b:+.2f} s")
        t0 = time.perf_counter()
        running.run("squeue", "--me", "-h", "-t", "all", "-O", "JobID:|,State:|,Reason:|")
        squeue_s = time.perf_counter() - t0
        cost = polling_cost(root)
        print(f"one real squeue call: {squeue_s * 1000:.0f} ms")
        print("agent period with 1,000 active jobs (one batched squeue answer): "
              + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in cost.items()))  # fmt: skip
    finally:
        running.stop()


if __name__ == "__main__":
    main()
