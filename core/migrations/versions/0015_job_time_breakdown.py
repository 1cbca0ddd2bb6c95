"""job_time_breakdown: where a finished job's wall time went (issue 38; core/time_breakdown.py), written at its
terminal transition so /metrics sums it per user and pool in the database; null: live, or finished before.

Revision ID: 0015_job_time_breakdown
Revises: 0014_user_max_priority
Create Date: 2026-12-07 02:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_job_time_breakdown"
down_revision: str | None = "0014_user_max_priority"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("time_breakdown", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("time_breakdown")
