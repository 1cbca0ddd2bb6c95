"""pools: the Slurm pools their agents registered (issue 35 part 3), so that one API takes jobs for every pool, its
hosts pools (from `hosts.pool`) and its Slurm pools alike, with nothing set on the API (core/pools.py).

Revision ID: 0016_pools
Revises: 0015_job_time_breakdown
Create Date: 2026-12-07 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_pools"
down_revision: str | None = "0015_job_time_breakdown"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=100), primary_key=True),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("partition", sa.String(length=100), nullable=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pools")
