"""The store: tokens, jobs, shapes, samples per job and per node, events.

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
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("tokens.id"), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("workload", sa.String(200), nullable=False),
        sa.Column("dataset", sa.String(200), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("parameters", sa.BigInteger(), nullable=True),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("state_path", sa.Text(), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("launch_source", sa.String(16), nullable=True),
        sa.Column("launch_note", sa.Text(), nullable=True),
        sa.Column("predicted_time_s", sa.Float(), nullable=True),
        sa.Column("predicted_core_h", sa.Float(), nullable=True),
        sa.Column("measured_time_s", sa.Float(), nullable=True),
        sa.Column("measured_core_h", sa.Float(), nullable=True),
        sa.Column("best_samples_per_s", sa.Float(), nullable=True),
        sa.Column("time_to_95_s", sa.Float(), nullable=True),
        sa.Column("accounting", sa.JSON(), nullable=True),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_jobs_owner_id", "jobs", ["owner_id"])
    op.create_index("ix_jobs_phase", "jobs", ["phase"])
    op.create_index("ix_jobs_workload", "jobs", ["workload"])
    op.create_table(
        "shapes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.Column("transition_s", sa.Float(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
    )  # fmt: skip
    op.create_index("ix_shapes_job_id", "shapes", ["job_id"])
    op.create_table(
        "samples",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("steps_done", sa.Integer(), nullable=False),
        sa.Column("steps_per_s", sa.Float(), nullable=False),
        sa.Column("samples_per_s", sa.Float(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("e_job", sa.Float(), nullable=True),
        sa.Column("shape", sa.Text(), nullable=False),
    )  # fmt: skip
    op.create_index("ix_samples_job_id", "samples", ["job_id"])
    op.create_table(
        "node_samples",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("sample_id", sa.Integer(), sa.ForeignKey("samples.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("cpu_used", sa.Float(), nullable=False),
        sa.Column("cpu_allocated", sa.Float(), nullable=False),
        sa.Column("memory_used", sa.BigInteger(), nullable=False),
        sa.Column("memory_allocated", sa.BigInteger(), nullable=False),
        sa.Column("net_in", sa.Float(), nullable=False),
        sa.Column("net_out", sa.Float(), nullable=False),
        sa.Column("steps_per_s", sa.Float(), nullable=False),
    )  # fmt: skip
    op.create_index("ix_node_samples_sample_id", "node_samples", ["sample_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
    )  # fmt: skip
    op.create_index("ix_events_job_id", "events", ["job_id"])


def downgrade() -> None:
    for table in ("events", "node_samples", "samples", "shapes", "jobs", "tokens"):
        op.drop_table(table)
