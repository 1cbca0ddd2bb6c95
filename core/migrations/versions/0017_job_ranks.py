"""job_ranks: every rank's progress as the worker last read it, and the last stall's account (the ranks it
blamed, their Python stacks) (issue 38; core/rank_health.py, worker/rank_watch.py); null: none seen.

Revision ID: 0017_job_ranks
Revises: 0016_pools
Create Date: 2026-12-07 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_job_ranks"
down_revision: str | None = "0016_pools"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("rank_progress", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("stuck_ranks", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("stuck_ranks")
        batch.drop_column("rank_progress")
