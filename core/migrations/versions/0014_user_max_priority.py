"""user_max_priority: a member's priority ceiling, set by an admin (issue 34 part 4); null: the default
(core/quotas.py DEFAULT_MAX_PRIORITY). A job's priority above it is refused at submit and at PATCH.

Revision ID: 0014_user_max_priority
Revises: 0013_backend_status
Create Date: 2026-12-07 01:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_user_max_priority"
down_revision: str | None = "0013_backend_status"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("max_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("max_priority")
