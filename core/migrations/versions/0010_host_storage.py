"""hosts.storage: whether a host's jobs' files reach the API (shared runs dir, or uploaded to the
artifact store; core/artifacts/sharing.py). Issue 22 part B.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 20:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("storage", sa.String(length=16), nullable=False, server_default="unknown"))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("storage")
