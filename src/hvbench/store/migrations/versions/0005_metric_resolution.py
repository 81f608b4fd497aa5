"""metrics.resolution: the smallest change of a value its measurement can show

Runs stored before have NULL: their tools' resolution was not recorded, and the analysis does
not guess it.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("resolution", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("resolution")
