"""job_vouched_at: a queued, placed job's own "vouched for" time (heartbeat_at is only a live job's now)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("vouched_at", sa.DateTime(timezone=True), nullable=True))
    # A placed queued row vouched for through its heartbeat keeps that time; a queued row forgets it.
    op.execute("UPDATE jobs SET vouched_at = heartbeat_at WHERE status = 'queued' AND placement_id IS NOT NULL")
    op.execute("UPDATE jobs SET heartbeat_at = NULL WHERE status = 'queued'")


def downgrade() -> None:
    op.execute("UPDATE jobs SET heartbeat_at = vouched_at WHERE status = 'queued' AND vouched_at IS NOT NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("vouched_at")
