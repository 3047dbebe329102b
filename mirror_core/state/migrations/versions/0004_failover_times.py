"""failover times: when the run was triggered and when it was approved, so RTO reads off the record

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("failovers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("triggered_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("failovers", schema=None) as batch_op:
        batch_op.drop_column("approved_at")
        batch_op.drop_column("triggered_at")
