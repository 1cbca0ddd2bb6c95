"""user_webhooks: a user's own webhooks (issue 37 part 5): table `webhooks`; a delivery names its webhook
(null: one of the server's); an event may be a sweep's end (sweep_id set, job_id null).

Revision ID: 0018_user_webhooks
Revises: 0017_job_ranks
Create Date: 2026-12-07 05:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_user_webhooks"
down_revision: str | None = "0017_job_ranks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_webhooks_owner_id", "webhooks", ["owner_id"])
    with op.batch_alter_table("notification_events") as batch:
        batch.alter_column("job_id", existing_type=sa.Integer(), nullable=True)
        batch.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_notification_events_sweep_id_sweeps", "sweeps", ["sweep_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_notification_events_sweep_id", ["sweep_id"])
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.alter_column("job_id", existing_type=sa.Integer(), nullable=True)
        batch.add_column(sa.Column("webhook_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_notification_deliveries_webhook_id_webhooks", "webhooks", ["webhook_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_notification_deliveries_webhook_id", ["webhook_id"])


def downgrade() -> None:
    op.execute("DELETE FROM notification_deliveries WHERE job_id IS NULL OR webhook_id IS NOT NULL")
    op.execute("DELETE FROM notification_events WHERE job_id IS NULL")
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.drop_index("ix_notification_deliveries_webhook_id")
        batch.drop_constraint("fk_notification_deliveries_webhook_id_webhooks", type_="foreignkey")
        batch.drop_column("webhook_id")
        batch.alter_column("job_id", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("notification_events") as batch:
        batch.drop_index("ix_notification_events_sweep_id")
        batch.drop_constraint("fk_notification_events_sweep_id_sweeps", type_="foreignkey")
        batch.drop_column("sweep_id")
        batch.alter_column("job_id", existing_type=sa.Integer(), nullable=False)
    op.drop_index("ix_webhooks_owner_id", table_name="webhooks")
    op.drop_table("webhooks")
