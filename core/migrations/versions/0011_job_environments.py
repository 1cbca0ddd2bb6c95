"""job_environments: a job's own Python packages, the lock its first build resolved (issue 28)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 20:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_environments",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("lock", sa.Text(), nullable=True),
        sa.Column("key", sa.String(length=64), nullable=True),
        sa.Column("packages", sa.JSON(), nullable=True),
        sa.Column("own_torch", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("python", sa.String(length=40), nullable=True),
        sa.Column("torch", sa.String(length=60), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("prepare_s", sa.Float(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_job_environments_input_hash", "job_environments", ["input_hash"])


def downgrade() -> None:
    op.drop_index("ix_job_environments_input_hash", table_name="job_environments")
    op.drop_table("job_environments")
