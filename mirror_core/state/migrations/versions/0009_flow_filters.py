"""flow filters: topics / topics.exclude / groups / groups.exclude of a flow set in the state store (who, when, why),
and the filters each mirror instance applies (flow_instances.filters)

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "flow_filters",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("flow", sa.String(length=300), nullable=False),
        sa.Column("topics", sa.Text(), nullable=True),
        sa.Column("topics_exclude", sa.Text(), nullable=True),
        sa.Column("groups", sa.Text(), nullable=True),
        sa.Column("groups_exclude", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("set_by", sa.String(length=250), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cleared_by", sa.String(length=250), nullable=True),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("clear_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("flow_filters", schema=None) as batch_op:
        # At most one active filter row per flow, also against two operators changing it at once.
        batch_op.create_index("uq_flow_filters_active", ["flow"], unique=True,
                              sqlite_where=sa.text("cleared_at IS NULL"),
                              postgresql_where=sa.text("cleared_at IS NULL"))
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("filters", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.drop_column("filters")
    with op.batch_alter_table("flow_filters", schema=None) as batch_op:
        batch_op.drop_index("uq_flow_filters_active")
    op.drop_table("flow_filters")
