"""flow control: desired flow states and what mirror instances report

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "flow_controls",
        sa.Column("flow", sa.String(length=300), nullable=False),
        sa.Column("desired", sa.String(length=16), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("changed_by", sa.String(length=250), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=True),
        sa.PrimaryKeyConstraint("flow"),
    )
    op.create_table(
        "flow_instances",
        sa.Column("instance", sa.String(length=250), nullable=False),
        sa.Column("flow", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("instance", "flow"),
    )
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_flow_instances_seen_at"), ["seen_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("flow_instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_flow_instances_seen_at"))
    op.drop_table("flow_instances")
    op.drop_table("flow_controls")
