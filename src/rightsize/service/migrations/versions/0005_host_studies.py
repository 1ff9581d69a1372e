"""Studies: one that `rightsize tune` wrote on the host without a token has no owner.

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
    with op.batch_alter_table("studies") as batch:
        batch.alter_column("owner_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM studies WHERE owner_id IS NULL")
    with op.batch_alter_table("studies") as batch:
        batch.alter_column("owner_id", existing_type=sa.Integer(), nullable=False)
