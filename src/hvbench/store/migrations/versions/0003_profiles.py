"""profiles, profile_functions: the host's top functions during each sample (study profile)

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("frequency_hz", sa.Integer(), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["sample_id"], ["samples.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("sample_id"),
    )
    op.create_table(
        "profile_functions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("percent", sa.Float(), nullable=False),
        sa.Column("symbol", sa.Text(), nullable=False),
        sa.Column("dso", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["profile_id"], ["profiles.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("profile_functions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_profile_functions_profile_id"), ["profile_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("profile_functions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_profile_functions_profile_id"))
    op.drop_table("profile_functions")
    op.drop_table("profiles")
