"""operations: an operator's host drain, GPU faults, the notification outbox and its delivery log (issue 25)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 17:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("drain_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("drain_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("gpu_faults", sa.JSON(), nullable=True))
    op.create_table(
        "notification_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fanned_out", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_notification_events_job_id", "notification_events", ["job_id"])
    op.create_index("ix_notification_events_fanned_out", "notification_events", ["fanned_out"])
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "event_id", sa.Integer(), sa.ForeignKey("notification_events.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_notification_deliveries_event_id", "notification_deliveries", ["event_id"])
    op.create_index("ix_notification_deliveries_job_id", "notification_deliveries", ["job_id"])
    op.create_index("ix_notification_deliveries_state_next", "notification_deliveries", ["state", "next_at"])


def downgrade() -> None:
    op.drop_table("notification_deliveries")
    op.drop_table("notification_events")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("gpu_faults")
        batch.drop_column("drain_note")
        batch.drop_column("drain_requested")
