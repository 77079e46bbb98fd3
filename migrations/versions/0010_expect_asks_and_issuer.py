"""`expect` counted per (issuer, subject, text as the decoder scores it) in its own table, and the token issuer on
audit events (issue 52: N1, N5, N6).

`hero_expect_asks` holds one row per value asked; its primary key makes the count exact under concurrency. The
values asked before this revision are carried over from the `verify` events' details, keyed by the exact text's
SHA-256 (`sha256:<hex>`, which verifier/verify/expect.py still reads beside the normalised key) and issuer "" (which
counts for every issuer of that subject: the count errs on the side of refusing).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_ASKED = re.compile(r"(?:^| )expect=l(\d+):(\d+):")


def upgrade() -> None:
    with op.batch_alter_table("hero_audit_events") as batch:
        batch.add_column(sa.Column("issuer", sa.String(256), nullable=True))
    asks = op.create_table(
        "hero_expect_asks",
        sa.Column("issuer", sa.String(256), nullable=False),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("text_key", sa.String(80), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("issuer", "subject", "text_key", "level", "value", name="pk_hero_expect_asks"),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT subject, text_sha256, detail FROM hero_audit_events WHERE action = 'verify' "
                                "AND text_sha256 IS NOT NULL AND detail LIKE '%expect=l%'"))
    seen: set[tuple] = set()
    for subject, digest, detail in rows:
        for lv, v in _ASKED.findall(detail or ""):
            seen.add(("", subject, f"sha256:{digest}", int(lv), int(v)))
    if seen:
        op.bulk_insert(asks, [dict(zip(("issuer", "subject", "text_key", "level", "value"), r, strict=True))
                              for r in sorted(seen)])


def downgrade() -> None:
    op.drop_table("hero_expect_asks")
    with op.batch_alter_table("hero_audit_events") as batch:
        batch.drop_column("issuer")
