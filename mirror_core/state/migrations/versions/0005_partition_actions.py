"""partition actions: an operator's resume or skip of one paused source partition (who, when, why, outcome)

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "partition_actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("flow", sa.String(length=300), nullable=False),
        sa.Column("topic", sa.String(length=300), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=True),
        sa.Column("last_offset", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(length=250), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("applied_by", sa.String(length=250), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("partition_actions", schema=None) as batch_op:
        batch_op.create_index("ix_partition_actions_flow_applied_at", ["flow", "applied_at"], unique=False)
        # At most one pending action per partition, also against concurrent requests.
        batch_op.create_index("uq_partition_actions_pending", ["flow", "topic", "partition"], unique=True,
                              sqlite_where=sa.text("applied_at IS NULL"),
                              postgresql_where=sa.text("applied_at IS NULL"))


def downgrade() -> None:
    with op.batch_alter_table("partition_actions", schema=None) as batch_op:
        batch_op.drop_index("uq_partition_actions_pending")
        batch_op.drop_index("ix_partition_actions_flow_applied_at")
    op.drop_table("partition_actions")
