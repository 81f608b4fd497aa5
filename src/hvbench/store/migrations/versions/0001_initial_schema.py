"""initial schema

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("study_name", sa.String(length=100), nullable=False),
        sa.Column("study_text", sa.Text(), nullable=False),
        sa.Column("study_source", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("hvbench_version", sa.String(length=40), nullable=False),
        sa.Column("git_commit", sa.String(length=40), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("inventory", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "name"),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_artifacts_run_id"), ["run_id"], unique=False)

    op.create_table(
        "cells",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("platform", sa.String(length=40), nullable=False),
        sa.Column("driver", sa.String(length=40), nullable=False),
        sa.Column("workload", sa.String(length=200), nullable=False),
        sa.Column("workload_name", sa.String(length=40), nullable=False),
        sa.Column("instances", sa.Integer(), nullable=False),
        sa.Column("platform_settings", sa.JSON(), nullable=False),
        sa.Column("workload_settings", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "key"),
    )
    with op.batch_alter_table("cells", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cells_run_id"), ["run_id"], unique=False)

    op.create_table(
        "samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("platform_state", sa.JSON(), nullable=False),
        sa.Column("host_cpu", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["cell_id"], ["cells.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("cell_id", "repetition"),
    )
    with op.batch_alter_table("samples", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_samples_cell_id"), ["cell_id"], unique=False)

    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.Integer(), nullable=False),
        sa.Column("instance", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("text", sa.String(length=200), nullable=True),
        sa.Column("unit", sa.String(length=20), nullable=False),
        sa.Column("higher_is_better", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["sample_id"], ["samples.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_metrics_sample_id"), ["sample_id"], unique=False)

    op.create_table(
        "raw_outputs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.Integer(), nullable=False),
        sa.Column("instance", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=40), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["sample_id"], ["samples.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("raw_outputs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_raw_outputs_sample_id"), ["sample_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("raw_outputs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_raw_outputs_sample_id"))

    op.drop_table("raw_outputs")
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_metrics_sample_id"))

    op.drop_table("metrics")
    with op.batch_alter_table("samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_samples_cell_id"))

    op.drop_table("samples")
    with op.batch_alter_table("cells", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cells_run_id"))

    op.drop_table("cells")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_artifacts_run_id"))

    op.drop_table("artifacts")
    op.drop_table("runs")
