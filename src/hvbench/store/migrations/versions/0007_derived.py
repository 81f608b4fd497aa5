"""derived: what hvbench worked out of a run and keeps to save working it out again (a run's
series figures, where its HTML report was written), keyed by the code and run state it came from

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "derived",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "name"),
    )
    with op.batch_alter_table("derived", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_derived_name"), ["name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("derived", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_derived_name"))
    op.drop_table("derived")
