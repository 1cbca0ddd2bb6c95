"""Which rank is stuck, which rank is slow (issue 38), end to end: a two-rank script job (torchrun, gloo on
CPU) through the API and a real worker; REST names the rank and shows its Python stacks (py-spy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.scripts.conftest import script_spec
from tests.support.commands import ROOT

RANKZERO = str(Path(sys.executable).with_name("rankzero"))


def _show(client: Any, token: str, job_id: int) -> str:
    """`rankzero show JOB` as a user runs it, against the test's API."""
    url = str(client.http.base_url).removesuffix("/api/").removesuffix("/api")
    env = dict(os.environ) | {"RANKZERO_URL": url, "RANKZERO_API_TOKEN": token, "COLUMNS": "200"}
    done = subprocess.run([RANKZERO, "show", str(job_id)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=90, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_rank_that_sleeps_for_ever_is_named_with_its_stack(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("rank_hang"))
    spec = script_spec("rank-hang", code, "train.py", nproc=2, stall_timeout_s=10, max_restarts=0)
    job = client.submit(spec)
    # The stall window: 10 s of silence after step 5, then the report, then the ranks are stopped.
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "failed", (done, workers.log())
    assert "rank 1 hung (last step done: 5); rank 0 waited for it" in done["error"], done["error"]
    stuck = done["ranks"]["stuck"]
    assert stuck["ranks"] == [1] and stuck["waiting"] == [0], stuck
    assert stuck["unavailable"] == {}, stuck["unavailable"]
    assert "sleep_forever (train.py" in stuck["stacks"]["1"], stuck["stacks"]
    assert "all_reduce" in stuck["stacks"]["0"], stuck["stacks"]  # the rank that waited, in its collective
    assert {r["rank"]: r["step"] for r in done["ranks"]["ranks"]} == {0: 5, 1: 5}, done["ranks"]
    shown = _show(client, settings.token(), job["id"])
    assert "stuck (attempt 1): rank 1 hung (last step done: 5); rank 0 waited for it" in shown, shown
    assert "rank 1's Python stacks when it was stopped (py-spy):" in shown and "sleep_forever" in shown, shown


def test_a_rank_slowed_on_purpose_is_flagged(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("rank_slow"))
    job = client.submit(script_spec("rank-slow", code, "train.py", nproc=2))
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "succeeded", (done, workers.log())
    ranks = done["ranks"]
    assert ranks["timed_by"] == "work", ranks
    by_rank = {r["rank"]: r for r in ranks["ranks"]}
    assert by_rank[0]["step"] == by_rank[1]["step"] == 30, ranks
    assert by_rank[1]["score"] > 1.25 > by_rank[0]["score"], ranks
    assert len(ranks["stragglers"]) == 1 and ranks["stragglers"][0].startswith("rank 1 is "), ranks
    assert ranks["stragglers"][0].endswith("× slower than the median rank"), ranks
    assert f"slow: {ranks['stragglers'][0]}" in _show(client, settings.token(), job["id"])
