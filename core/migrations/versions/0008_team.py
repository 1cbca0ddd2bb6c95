"""team: users, their tokens and dashboard sessions, fair-share usage, the audit log; job owner,
archive flag, tags and note (issue 23). Every existing job is owned by the first admin (id 1), whom
the server's own token signs in as: an upgrade loses nothing and changes no one's access.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 20:10:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIRST_ADMIN_ID = 1
FIRST_ADMIN_NAME = "admin"


def _ts(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    users = op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("role", sa.String(length=10), nullable=False),
        _ts("created_at", nullable=False),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_cpu_slots", sa.Integer(), nullable=True),
        sa.Column("max_queued", sa.Integer(), nullable=True),
    )
    op.create_index("ix_users_name", "users", ["name"], unique=True)
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        _ts("created_at", nullable=False),
        _ts("last_used_at"),
        _ts("revoked_at"),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.create_index("ix_api_tokens_token_sha256", "api_tokens", ["token_sha256"], unique=True)
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("token_id", sa.Integer(), sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=True),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        _ts("created_at", nullable=False),
    )
    op.create_index("ix_web_sessions_user_id", "web_sessions", ["user_id"])
    op.create_index("ix_web_sessions_token_id", "web_sessions", ["token_id"])
    op.create_table(
        "user_usage",
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("as_of", sa.Float(), nullable=False),
        sa.Column("rate", sa.Float(), nullable=False),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        _ts("at", nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=40), nullable=False),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_actor_id", "audit_events", ["actor_id"])
    op.create_index("ix_audit_events_action", "audit_events", ["action"])

    op.bulk_insert(
        users,
        [{"id": FIRST_ADMIN_ID, "name": FIRST_ADMIN_NAME, "role": "admin", "created_at": datetime.now(timezone.utc)}],
    )
    if op.get_bind().dialect.name == "postgresql":  # the explicit id 1 did not advance the sequence
        op.execute("SELECT setval(pg_get_serial_sequence('users', 'id'), (SELECT max(id) FROM users))")

    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("tags", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch.create_foreign_key("fk_jobs_owner_id_users", "users", ["owner_id"], ["id"])
        batch.create_index("ix_jobs_owner_id", ["owner_id"])
        batch.create_index("ix_jobs_archived", ["archived"])
    op.execute(sa.text("UPDATE jobs SET owner_id = :admin").bindparams(admin=FIRST_ADMIN_ID))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_archived")
        batch.drop_index("ix_jobs_owner_id")
        batch.drop_constraint("fk_jobs_owner_id_users", type_="foreignkey")
        batch.drop_column("note")
        batch.drop_column("tags")
        batch.drop_column("archived")
        batch.drop_column("owner_id")
    op.drop_table("audit_events")
    op.drop_table("user_usage")
    op.drop_table("web_sessions")
    op.drop_table("api_tokens")
    op.drop_table("users")
