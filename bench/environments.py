"""A job's own packages (issue 28): the cold build and the cached start of a typical set, beside a bare
`uv venv` + `uv pip install` of the same set (cold uv cache, then warm).

- cold: a new cache (uv's download cache too): resolve (`uv pip compile`) + build the entry (worker/environments/).
- cached start: a new job with the same set: its lock reused, the entry found (what a job adds at its start).
- bare uv: a venv of the same Python and `uv pip install` of the set, with nothing layered.

Needs PyPI (or RANKZERO_ENVIRONMENT_INDEX_URL). Run: .venv/bin/python -m bench.environments
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.spec import JobSpec
from worker.environments import prepare
from worker.environments.uv import uv_bin, uv_env

TYPICAL = ["einops==0.8.1", "tabulate", "humanize", "termcolor", "pyjokes", "six==1.16.0"]
CACHED_RUNS = 20


def _job(engine, spec: JobSpec) -> int:
    with Session(engine) as s:
        job = Job(name="bench", spec=spec.model_dump(mode="json"), status=JobStatus.starting, attempt=1)
        s.add(job)
        s.commit()
        assert job.id is not None
        return job.id


def _bare_uv(tmp: Path, cache: Path) -> float:
    venv = tmp / f"bare-{time.monotonic_ns()}"
    env = uv_env(cache, tmp)  # the worker's own uv environment: no config files, the same certificates
    start = time.monotonic()
    subprocess.run([uv_bin(), "venv", str(venv), "--python", sys.executable, "-q"], check=True, env=env)
    subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *TYPICAL],
                   check=True, env=env)  # fmt: skip
    return time.monotonic() - start


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-env-") as raw:
        tmp = Path(raw)
        settings = Settings(data_dir=tmp / "data", runs_dir=tmp / "runs",  # pyright: ignore[reportCallIssue]
                            environment_dir=tmp / "environments")  # fmt: skip
        settings.data_dir.mkdir(parents=True)
        upgrade(settings.resolved_database_url)
        engine = get_engine(settings.resolved_database_url)
        spec = JobSpec.model_validate({"max_steps": 1, "environment": {"packages": TYPICAL}})
        start = time.monotonic()
        ready = prepare(engine, settings, _job(engine, spec), spec, None, tmp / "cold.log")
        cold = time.monotonic() - start
        assert ready is not None and not ready.cached
        cached = []
        for i in range(CACHED_RUNS):
            start = time.monotonic()
            again = prepare(engine, settings, _job(engine, spec), spec, None, tmp / f"cached{i}.log")
            cached.append(time.monotonic() - start)
            assert again is not None and again.cached
        bare_cold = _bare_uv(tmp, tmp / "bare-uv-cache")
        bare_warm = _bare_uv(tmp, tmp / "bare-uv-cache")
        print(f"set: {' '.join(TYPICAL)} ({ready.packages} packages locked, {ready.installed} installed own)")
        print(f"cold build (resolve + build, empty caches): {cold:.2f} s")
        print(f"cached start: median {statistics.median(cached) * 1000:.1f} ms, max {max(cached) * 1000:.1f} ms "
              f"over {CACHED_RUNS} jobs")  # fmt: skip
        print(f"bare uv venv + uv pip install: {bare_cold:.2f} s (empty uv cache), {bare_warm:.2f} s (warm)")


if __name__ == "__main__":
    main()
