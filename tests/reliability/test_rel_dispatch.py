"""The database is the queue of record (hardening item 14): a job whose message never reached the
broker (the API killed between commit and send) or was lost with it (Redis flushed or restarted
without persistence) still runs, exactly once."""

from __future__ import annotations

import redis
from sqlmodel import Session

from core import jobs
from core.db import get_engine
from tests.support.jobs import slow_spec
from trainer.spec import JobSpec


def test_lost_messages_are_sent_again_and_each_job_runs_once(service, workers, redis_server) -> None:
    settings, client = service(broker_url=redis_server.url)
    # No worker yet: three jobs wait in Redis; a fourth row is committed but its message never sent.
    submitted = [client.submit(slow_spec(f"in-redis-{i}", step_s=0.0, max_steps=3, nproc=1)) for i in range(3)]
    with Session(get_engine(settings.resolved_database_url)) as s:
        spec = slow_spec("never-sent", step_s=0.0, max_steps=3, nproc=1)
        orphan = jobs.create(s, "never-sent", JobSpec.model_validate(spec).model_dump(mode="json"), settings.queue).id
    redis.Redis.from_url(redis_server.url).flushall()  # every queued message is gone
    workers.start(settings, extra_env={"RANKZERO_REDISPATCH_AFTER_S": "2", "RANKZERO_STALE_AFTER_S": "3"})
    for job_id in [j["id"] for j in submitted] + [orphan]:
        done = client.wait_terminal(job_id, 120)
        assert done["status"] == "succeeded" and done["attempt"] == 1, done
