"""paused partitions: each mirror instance's heartbeat also carries its paused source partitions and why

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("paused", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.drop_column("paused")
