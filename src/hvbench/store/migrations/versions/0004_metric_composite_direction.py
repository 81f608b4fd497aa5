"""metrics.composite, metrics.direction: what the workloads declare of each metric

Runs stored before are given what the analysis used to infer of their names, once, here: a
higher-is-better metric of a ``cpu`` cell is a sub-score of its composite, and a metric with the
word inbound (outbound) in its name measures inbound (outbound) traffic.

Revision ID: 0004
Revises: 0003
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_WORD = {d: re.compile(rf"(?<![a-z]){d}(?![a-z])") for d in ("inbound", "outbound")}


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(
            sa.Column("composite", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("direction", sa.String(8), nullable=True))
    conn = op.get_bind()
    conn.execute(
        sa.text(
            "update metrics set composite = :yes where higher_is_better = :yes and sample_id in "
            "(select samples.id from samples join cells on samples.cell_id = cells.id "
            "where cells.workload_name = 'cpu')"
        ),
        {"yes": True},
    )
    named = conn.execute(
        sa.text(
            "select id, name from metrics where name like '%inbound%' or name like '%outbound%'"
        )
    )
    for metric_id, name in list(named):
        direction = next((d for d, word in _WORD.items() if word.search(name)), None)
        if direction:
            conn.execute(
                sa.text("update metrics set direction = :d where id = :id"),
                {"d": direction, "id": metric_id},
            )


def downgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("direction")
        batch.drop_column("composite")
