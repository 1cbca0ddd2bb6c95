"""job_backend_status: where and how an external backend runs a job, as its agent last saw it (a Slurm
job's partition, node list, state and that state in words), for the job page, the CLI and REST

Revision ID: 0013_backend_status
Revises: 0012
Create Date: 2026-11-28 06:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_backend_status"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("backend_partition", sa.String(length=100), nullable=True))
        batch.add_column(sa.Column("backend_nodes", sa.Text(), nullable=True))
        batch.add_column(sa.Column("backend_state", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("backend_state_words", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("backend_state_words")
        batch.drop_column("backend_state")
        batch.drop_column("backend_nodes")
        batch.drop_column("backend_partition")
