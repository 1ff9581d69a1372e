"""Jobs: the host's declared instance type (plan reads runs by it), what a prediction
rests on, and the samples a job trains (the time left of a running one).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("instance_type", sa.String(64), nullable=True))
        batch.add_column(sa.Column("predicted_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("samples_total", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("samples_total")
        batch.drop_column("predicted_note")
        batch.drop_column("instance_type")
