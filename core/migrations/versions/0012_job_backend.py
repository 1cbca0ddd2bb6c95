"""job_backend: the id of a job handed to an external backend (a Slurm job id) and its first attempt;
slurm_nodes: a Slurm pool's nodes as sinfo last showed them (the hosts page)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 20:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("backend_job_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("backend_first_attempt", sa.Integer(), nullable=True))
    op.create_table(
        "slurm_nodes",
        sa.Column("pool", sa.String(length=100), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("partition", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("cpus", sa.String(length=40), nullable=False),
        sa.Column("gres", sa.String(length=400), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("pool", "node", "partition"),
    )


def downgrade() -> None:
    op.drop_table("slurm_nodes")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("backend_first_attempt")
        batch.drop_column("backend_job_id")
