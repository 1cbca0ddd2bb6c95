"""hosts; the scheduler's columns on jobs (priority, placement, pending reason, host losses)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=100), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("cpu_slots", sa.Integer(), nullable=False),
        sa.Column("storage_id", sa.String(length=64), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("placement", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("placement_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("rendezvous", sa.String(length=300), nullable=True))
        batch.add_column(sa.Column("pending_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("preempt_for", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("host_losses", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("restarts_used", sa.Integer(), nullable=False, server_default="0"))
        batch.create_index("ix_jobs_priority", ["priority"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_priority")
        for column in (
            "restarts_used", "host_losses", "preempt_for", "pending_reason", "rendezvous", "placement_id",
            "placement", "priority",
        ):  # fmt: skip
            batch.drop_column(column)
    op.drop_table("hosts")
