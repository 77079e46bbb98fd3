"""Service schema: encrypted key versions and the hash-chained audit log.

Revision ID: 0001
Revises:
Create Date: 2025-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hero_key_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("profile", sa.String(64), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("kek_id", sa.String(64), nullable=True),
        sa.Column("wrapped_dek", sa.LargeBinary, nullable=True),
        sa.Column("nonce", sa.LargeBinary, nullable=True),
        sa.Column("ciphertext", sa.LargeBinary, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("profile", "level", "seq", name="uq_hero_key_versions_seq"),
        sa.UniqueConstraint("profile", "version", name="uq_hero_key_versions_version"),
        sa.CheckConstraint(
            "status IN ('active', 'verify-only', 'disabled', 'destroyed')", name="ck_hero_key_versions_status"
        ),
    )
    op.create_table(
        "hero_audit_events",
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("jti", sa.String(256), nullable=False),
        sa.Column("levels", sa.String(64), nullable=False),
        sa.Column("key_version", sa.String(64), nullable=True),
        sa.Column("text_sha256", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
    )


def downgrade() -> None:
    op.drop_table("hero_audit_events")
    op.drop_table("hero_key_versions")
