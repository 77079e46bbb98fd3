"""Decode jobs: one row per job, one per text (AES-GCM ciphertext, claim lease, result).

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hero_jobs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner_sub", sa.String(256), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("jti", sa.String(256), nullable=False),
        sa.Column("max_level", sa.Integer, nullable=False),
        sa.Column("profile", sa.String(64), nullable=False),
        sa.Column("alpha", sa.Float, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("enqueued_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("kek_id", sa.String(64), nullable=False),
        sa.Column("wrapped_dek", sa.LargeBinary, nullable=False),
        sa.Column("keys_handed", sa.Text, nullable=True),
        sa.CheckConstraint("status IN ('queued', 'running', 'done', 'failed')", name="ck_hero_jobs_status"),
    )
    op.create_index("ix_hero_jobs_status_updated", "hero_jobs", ["status", "updated_at"])
    op.create_table(
        "hero_job_items",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(36), sa.ForeignKey("hero_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("nonce", sa.LargeBinary, nullable=True),
        sa.Column("ciphertext", sa.LargeBinary, nullable=True),
        sa.Column("text_sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("claim_token", sa.String(32), nullable=True),
        sa.Column("claimed_by", sa.String(256), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("done_at", sa.Float, nullable=True),
        sa.UniqueConstraint("job_id", "idx", name="uq_hero_job_items_idx"),
        sa.CheckConstraint("status IN ('pending', 'claimed', 'done')", name="ck_hero_job_items_status"),
    )
    op.create_index("ix_hero_job_items_job_status", "hero_job_items", ["job_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_hero_job_items_job_status", table_name="hero_job_items")
    op.drop_table("hero_job_items")
    op.drop_index("ix_hero_jobs_status_updated", table_name="hero_jobs")
    op.drop_table("hero_jobs")
