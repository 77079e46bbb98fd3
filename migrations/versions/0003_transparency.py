"""Transparency log: Merkle subtree hashes over the audit events and signed checkpoints; job owners'
token issuer (a job belongs to (issuer, subject, role)).

Existing events are added to the tree (leaf data = the event's canonical JSON), up to the first gap.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_FIELDS = ("idx", "created_at", "action", "subject", "role", "jti", "levels", "key_version", "text_sha256",
           "outcome", "detail")


def upgrade() -> None:
    from verifier.audit.transparency import Frontier, canonical, leaf_hash

    tree_t = op.create_table(
        "hero_audit_tree",
        sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    )
    op.create_table(
        "hero_audit_checkpoints",
        sa.Column("size", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    with op.batch_alter_table("hero_jobs") as batch:
        batch.add_column(sa.Column("owner_iss", sa.String(256), nullable=False, server_default=""))
    conn = op.get_bind()
    events = sa.table("hero_audit_events", *(sa.column(f) for f in _FIELDS))
    rows = conn.execute(sa.select(*events.c).where(events.c.idx >= 1).order_by(events.c.idx))
    tree = Frontier()
    batch: list[dict] = []
    for row in rows:
        fields = dict(zip(_FIELDS, row, strict=True))
        if fields["idx"] != tree.size + 1:
            break  # a gap: the chain is already broken there; `hero audit verify` reports it
        for level, idx, h in tree.append(leaf_hash(canonical(fields))):
            batch.append({"level": level, "idx": idx, "hash": h})
        if len(batch) >= 5000:
            op.bulk_insert(tree_t, batch)
            batch = []
    if batch:
        op.bulk_insert(tree_t, batch)


def downgrade() -> None:
    with op.batch_alter_table("hero_jobs") as batch:
        batch.drop_column("owner_iss")
    op.drop_table("hero_audit_checkpoints")
    op.drop_table("hero_audit_tree")
