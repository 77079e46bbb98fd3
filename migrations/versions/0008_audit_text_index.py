"""Audit events: an index on (text_sha256, subject), so the values one subject has asked about one text
(`expect`, counted for its correction: verifier/verify/expect.py) are read without scanning the log.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_hero_audit_events_text_subject", "hero_audit_events", ["text_sha256", "subject"])


def downgrade() -> None:
    op.drop_index("ix_hero_audit_events_text_subject", table_name="hero_audit_events")
