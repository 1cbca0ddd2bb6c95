"""Issue 19 items 4 and 6: a job's quotas. `max_runtime_s` and `disk_limit_mb` stop the ranks (SIGTERM: they
checkpoint) and fail the job with the numbers; an events.jsonl line over 1 MiB fails it saying so; a series
flood is capped per job, counted, not stored, and said on the job's timeline, never failing it.

The rules are pure (worker/quota.py `breach`, worker/stop_reason.py, worker/decide.py): table tests. Then
real script jobs (tests/limits/projects/hog) under a real worker, all four at once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.scripts.conftest import script_spec
from tests.scripts.conftest import service_options as service_options  # the real launcher: script jobs
from tests.scripts.conftest import upload as upload
from worker.attempt import Ended, Seen, StopReason
from worker.decide import Facts, Fail, Standing, decide
from worker.quota import MIB, Quota, breach, dir_bytes
from worker.stop_reason import stop_note, stop_reason

HOG = Path(__file__).parent / "projects" / "hog"


@pytest.mark.parametrize(
    ("quota", "ran_s", "size", "overlong", "words"),
    [
        (Quota(), 10**6, 10**12, 0, None),  # no quota, no limit
        (Quota(max_runtime_s=60), 59.9, None, 0, None),
        (Quota(max_runtime_s=60), 60.0, None, 0, "reaching its max_runtime_s of 60 s"),
        (Quota(max_runtime_s=60), None, None, 0, None),  # not measured
        (Quota(disk_limit_mb=10), 0, 10 * MIB, 0, None),  # at the limit is within it
        (Quota(disk_limit_mb=10), 0, 10 * MIB + 1, 0, "its run dir holds 10 MiB, over its disk_limit_mb of 10 MiB"),
        (Quota(disk_limit_mb=10), 0, None, 0, None),  # not measured this look
        (Quota(), 0, None, 1, "events.jsonl line longer than 1 MiB"),
        (Quota(max_runtime_s=1, disk_limit_mb=1), 5, 5 * MIB, 0, "max_runtime_s"),  # the first rule wins
    ],
)
def test_which_quota_a_job_broke(quota: Quota, ran_s, size, overlong: int, words: str | None) -> None:
    said = breach(quota, ran_s, size, overlong)
    assert (said is None) if words is None else (said is not None and words in said), said


def test_a_broken_quota_stops_the_ranks_and_fails_the_job_without_a_restart() -> None:
    seen = Seen(status=None, attempt=1, broke_limit="it ran 61 s, reaching its max_runtime_s of 60 s")
    from core.tables import JobStatus
    from worker.attempt import Limits

    seen = Seen(status=JobStatus.running, attempt=1, broke_limit=seen.broke_limit)
    limits = Limits(attempt=1)
    assert stop_reason(seen, limits) is StopReason.limit
    note = stop_note(StopReason.limit, seen, limits)
    outcome = decide(
        Standing(attempt=1, max_restarts=5),
        Ended(exit_code=75, stopped_for=StopReason.limit, note=note),
        Facts(latest_checkpoint="checkpoints/step_00000040.pt"),
    )
    assert isinstance(outcome, Fail)  # never restarted: it would break the quota again
    assert outcome.error.startswith("it ran 61 s, reaching its max_runtime_s of 60 s; the worker stopped its ranks")
    assert "latest intact checkpoint: checkpoints/step_00000040.pt" in outcome.error
    # a cancel still wins over a quota
    assert stop_reason(Seen(status=JobStatus.cancelling, attempt=1, broke_limit="x"), limits) is StopReason.cancel


def test_the_run_dir_size_counts_blocks_once_and_follows_no_link(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.bin").write_bytes(os.urandom(1 << 20))
    os.link(tmp_path / "a" / "f.bin", tmp_path / "hard.bin")
    (tmp_path / "link").symlink_to("/usr")
    size = dir_bytes(tmp_path)
    assert 1 << 20 <= size < (1 << 20) + (1 << 16)
    assert dir_bytes(tmp_path, max_entries=2) >= 1 << 62  # past its bound: over any limit


def _timeline(client, job_id: int) -> list[str]:
    body = client.http.get(f"/jobs/{job_id}").json()
    return [t.get("detail") or "" for t in body["transitions"]]


def test_quota_breakers_fail_with_the_numbers_and_a_flood_is_capped(service, workers, upload, tmp_path) -> None:
    settings, client = service(job_max_series=10, heartbeat_s=0.5)
    workers.start(settings)
    code = upload(client, shutil.copytree(HOG, tmp_path / "hog"))
    jobs = {
        "runtime": client.submit(script_spec("q-runtime", code, "train.py runtime", max_runtime_s=3)),
        "disk": client.submit(script_spec("q-disk", code, "train.py disk", disk_limit_mb=2)),
        "longline": client.submit(script_spec("q-longline", code, "train.py longline")),
        "series": client.submit(script_spec("q-series", code, "train.py series")),
    }
    done = {mode: client.wait_terminal(job["id"], timeout=240) for mode, job in jobs.items()}

    assert done["runtime"]["status"] == "failed", done["runtime"]
    assert "max_runtime_s of 3 s" in done["runtime"]["error"], done["runtime"]["error"]
    assert done["disk"]["status"] == "failed" and "over its disk_limit_mb of 2 MiB" in done["disk"]["error"]
    assert done["longline"]["status"] == "failed"
    assert "events.jsonl line longer than 1 MiB" in done["longline"]["error"]
    for d in done.values():  # no worker path in what the user reads
        assert str(settings.resolved_runs_dir) not in (d.get("error") or "")

    assert done["series"]["status"] == "succeeded", done["series"]  # a flood never fails the job
    series = client.http.get(f"/jobs/{jobs['series']['id']}/metrics").json()["series"]
    assert len(series) <= 10
    said = [t for t in _timeline(client, jobs["series"]["id"]) if "counted, not stored" in t]
    assert said and "past its first 10 (RANKZERO_JOB_MAX_SERIES)" in said[0], _timeline(client, jobs["series"]["id"])


def test_no_worker_path_in_what_the_user_reads() -> None:
    from worker.user_paths import scrub

    names = {"/srv/rz/runs/job_1": "the run dir", "/srv/rz/data/bundles": "<code>", "/srv/rz/runs": "<runs dir>",
             "/srv/rz/data": "<data dir>"}  # fmt: skip
    said = (
        "could not save checkpoint step_1.pt in /srv/rz/runs/job_1/checkpoints: disk full; torchrun's log is in "
        f'/srv/rz/runs/job_1; File "/srv/rz/data/bundles/{"a" * 64}/train.py", line 3; '
        "/srv/rz/runs/job_12/model.pt; /srv/rz/data/api_token"
    )
    assert scrub(said, names) == (
        "could not save checkpoint step_1.pt in checkpoints: disk full; torchrun's log is in the run dir; "
        'File "<code>/train.py", line 3; <runs dir>/job_12/model.pt; <data dir>/api_token'
    )
