"""bound plans: the plan a failover/failback/cutover run assessed, its digest, and each gate's answer

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bound_plans",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("record_id", sa.Integer(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("triggered_by", sa.String(length=250), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dag_id", "run_id", name="uq_bound_plans_run"),
    )
    op.create_table(
        "plan_approvals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("gate", sa.String(length=250), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("chosen", sa.Text(), nullable=True),
        sa.Column("approver_id", sa.String(length=250), nullable=True),
        sa.Column("approver_name", sa.String(length=250), nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("refused", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["plan_id"], ["bound_plans.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("plan_id", "gate", name="uq_plan_approvals_gate"),
    )
    op.create_index("ix_plan_approvals_plan_id", "plan_approvals", ["plan_id"])


def downgrade() -> None:
    op.drop_index("ix_plan_approvals_plan_id", table_name="plan_approvals")
    op.drop_table("plan_approvals")
    op.drop_table("bound_plans")
