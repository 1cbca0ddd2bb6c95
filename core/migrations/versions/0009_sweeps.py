"""sweeps: a hyperparameter search and the link from each of its trials to its job (issue 24)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 20:30:00

`sweeps.owner_id` names a `users` row (issue 23, revision 0008).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_sweeps_name", "sweeps", ["name"])
    op.create_index("ix_sweeps_status", "sweeps", ["status"])
    op.create_index("ix_sweeps_owner_id", "sweeps", ["owner_id"])
    op.create_table(
        "sweep_trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("sweep_id", sa.Integer(), sa.ForeignKey("sweeps.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("pruned", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("pruned_step", sa.Integer(), nullable=True),
        sa.Column("rungs", sa.JSON(), nullable=False),
        sa.UniqueConstraint("sweep_id", "number", name="uq_sweep_trials_sweep_number"),
        sa.UniqueConstraint("job_id"),
    )
    op.create_index("ix_sweep_trials_sweep_id", "sweep_trials", ["sweep_id"])


def downgrade() -> None:
    op.drop_index("ix_sweep_trials_sweep_id", table_name="sweep_trials")
    op.drop_table("sweep_trials")
    op.drop_index("ix_sweeps_owner_id", table_name="sweeps")
    op.drop_index("ix_sweeps_status", table_name="sweeps")
    op.drop_index("ix_sweeps_name", table_name="sweeps")
    op.drop_table("sweeps")
