"""jobs: the pool a job belongs to, and the client's idempotency key

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("queue", sa.String(length=100), nullable=True))
        batch.add_column(sa.Column("idempotency_key", sa.String(length=200), nullable=True))
        batch.create_unique_constraint("uq_jobs_idempotency_key", ["idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_idempotency_key", type_="unique")
        batch.drop_column("idempotency_key")
        batch.drop_column("queue")
