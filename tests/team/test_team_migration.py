"""Migration 0105 (issue 23): a database of the schema before users keeps every job, each owned by the
first admin, whom the server token signs in as; and the models match the migrations."""

from __future__ import annotations

from sqlalchemy import text

from core.db import get_engine
from core.migrate import upgrade


def test_upgrading_keeps_every_job_owned_by_the_first_admin(database_url: str) -> None:
    upgrade(database_url, "0007")  # the schema before users
    engine = get_engine(database_url)
    with engine.begin() as conn:
        for name, status in [("old-a", "succeeded"), ("old-b", "queued"), ("old-c", "failed")]:
            conn.execute(
                text(
                    "INSERT INTO jobs (name, spec, status, attempt, created_at, priority, host_losses, restarts_used,"
                    " step, epoch, samples, ingested_seq) VALUES (:n, '{}', :s, 0, CURRENT_TIMESTAMP, 0, 0, 0,"
                    " 0, 0, 0, -1)"
                ),
                {"n": name, "s": status},
            )
    upgrade(database_url)
    with engine.connect() as conn:
        jobs = conn.execute(text("SELECT name, owner_id, archived FROM jobs ORDER BY id")).all()
        admins = conn.execute(text("SELECT id, name, role FROM users")).all()
    assert [(n, o, bool(a)) for n, o, a in jobs] == [("old-a", 1, False), ("old-b", 1, False), ("old-c", 1, False)]
    assert [tuple(r) for r in admins] == [(1, "admin", "admin")]
    with engine.begin() as conn:  # a user added later gets the next id (PostgreSQL's sequence moved past 1)
        conn.execute(text("INSERT INTO users (name, role, created_at) VALUES ('alice', 'member', CURRENT_TIMESTAMP)"))
        assert conn.execute(text("SELECT id FROM users WHERE name = 'alice'")).scalar() == 2
