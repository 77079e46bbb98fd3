"""Audit events name their canonicalisation: `hero_audit_events.canon` ("jcs": RFC 8785 for events appended from
this version on; NULL: Python json's sorted ASCII form, every event written before, which keep hashing and
verifying exactly as they did). The column is one of the event's hashed fields when set, so it cannot be
stripped without breaking the event's chain hash and leaf (verifier/audit/transparency.py, CANON_KEY).

Downgrade drops the column, and so refuses while any event uses it: the older code could neither hash nor verify
those events, and without the marker they would read as the older form and fail the chain.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hero_audit_events") as batch:
        batch.add_column(sa.Column("canon", sa.String(16), nullable=True))


def downgrade() -> None:
    marked = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM hero_audit_events WHERE canon IS NOT NULL")).scalar()
    if marked:
        raise RuntimeError(f"{marked} audit events are canonicalised with RFC 8785 (canon column): the older schema "
                           "cannot hold or verify them; restore a backup taken before upgrading instead")
    with op.batch_alter_table("hero_audit_events") as batch:
        batch.drop_column("canon")
