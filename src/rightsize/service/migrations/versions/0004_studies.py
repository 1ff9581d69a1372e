"""Studies: `rightsize tune` reports uploaded to the web pages.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("workload", sa.String(200), nullable=False),
        sa.Column("dataset", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
    )
    op.create_index("ix_studies_owner_id", "studies", ["owner_id"])


def downgrade() -> None:
    op.drop_index("ix_studies_owner_id", "studies")
    op.drop_table("studies")
