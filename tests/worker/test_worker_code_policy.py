"""The worker checks a job's user code against the allow-list again before it runs it (hardening item
7): a row that never came through the API's submit check, or an allow-list narrowed since, is refused
without launching anything."""

from __future__ import annotations

from sqlmodel import Session

from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus


def test_user_code_outside_the_allow_list_is_refused_by_the_worker(api_settings, sqlite_url, tmp_path) -> None:
    from worker.supervise import run_node

    settings = api_settings(database_url=sqlite_url, allowed_code="myorg")
    upgrade(sqlite_url)
    spec = {"name": "sneaky", "model": {"name": "os:system"}, "data": {"name": "digits"}, "max_steps": 1}
    allowed = {"name": "ok", "model": {"name": "myorg.models:net"}, "data": {"name": "digits"}, "max_steps": 1}
    with Session(get_engine(sqlite_url)) as s:  # straight into the table, as a row the API never checked
        sneaky = jobs.create(s, "sneaky", spec, settings.queue).id
    placed = {"nodes": [{"host": "h", "node_rank": 0, "gpus": [], "slots": 1}], "nproc": 1, "accumulation_steps": 1}
    with get_engine(sqlite_url).begin() as conn:  # as the scheduler would place it
        assert jobs.place(conn, sneaky, placed, "p1")
    account = run_node(sneaky, 0, "p1", settings)
    assert "user code not allowed" in account
    with Session(get_engine(sqlite_url)) as s:
        job = s.get(Job, sneaky)
        assert job.status == JobStatus.failed and job.attempt == 0  # never claimed, nothing launched
        assert "os:system" in job.error and "RANKZERO_ALLOWED_CODE" in job.error
    assert not list(settings.resolved_runs_dir.glob("job_*"))
    # An allowed prefix passes this check (the job then fails later for its own reasons: no such module).
    from core import code_policy
    from trainer.spec import JobSpec

    assert code_policy.user_code_refusal(JobSpec.model_validate(allowed), settings) is None
