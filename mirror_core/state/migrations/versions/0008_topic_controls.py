"""topic controls: an operator's pause of a topic or partition, or bandwidth limit of a flow or topic

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "topic_controls",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("flow", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("topic", sa.String(length=300), nullable=True),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("scope", sa.String(length=320), nullable=False),
        sa.Column("limit_bytes_per_s", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("set_by", sa.String(length=250), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cleared_by", sa.String(length=250), nullable=True),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("clear_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("topic_controls", schema=None) as batch_op:
        batch_op.create_index("ix_topic_controls_flow_cleared_at", ["flow", "cleared_at"], unique=False)
        # At most one active control per (flow, kind, scope), also against concurrent operators.
        batch_op.create_index("uq_topic_controls_active", ["flow", "kind", "scope"], unique=True,
                              sqlite_where=sa.text("cleared_at IS NULL"),
                              postgresql_where=sa.text("cleared_at IS NULL"))


def downgrade() -> None:
    with op.batch_alter_table("topic_controls", schema=None) as batch_op:
        batch_op.drop_index("uq_topic_controls_active")
        batch_op.drop_index("ix_topic_controls_flow_cleared_at")
    op.drop_table("topic_controls")
