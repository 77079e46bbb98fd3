"""Audit events: no unique index on `hash`.

Nothing looks an event up by its hash (appends chain on the newest row by `idx`; verification walks `idx`
order), and uniqueness already follows from the chain: each hash covers its predecessor's. The index cost a
B-tree insert at a random place per event, so every group commit dirtied about one index page per event and
an append got dearer as the log grew: SQLite, 128-event batches, 26 -> 39-43 us of CPU per event between 10k
and 60k events with it, a flat 21-23 without (docs/research/2026-11-performance-history.md, 2026-11-27).

On SQLite a table constraint cannot be dropped: the table is rebuilt (rows copied in `idx` order). On
PostgreSQL the constraint is dropped by its reflected name.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE = "hero_audit_events"
COLUMNS = ("idx, created_at, action, subject, role, jti, levels, key_version, text_sha256, outcome, detail, "
           "prev_hash, hash")


def _columns(unique_hash: bool) -> list[sa.Column]:
    return [
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
        sa.Column("hash", sa.String(64), nullable=False, unique=unique_hash),
    ]


def _rebuild_sqlite(unique_hash: bool) -> None:
    op.create_table(f"{TABLE}_new", *_columns(unique_hash))
    op.execute(f"INSERT INTO {TABLE}_new ({COLUMNS}) SELECT {COLUMNS} FROM {TABLE} ORDER BY idx")  # noqa: S608
    op.drop_table(TABLE)
    op.rename_table(f"{TABLE}_new", TABLE)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _rebuild_sqlite(unique_hash=False)
        return
    for uc in sa.inspect(bind).get_unique_constraints(TABLE):
        if uc["column_names"] == ["hash"]:
            op.drop_constraint(uc["name"], TABLE, type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(unique_hash=True)
        return
    op.create_unique_constraint(f"{TABLE}_hash_key", TABLE, ["hash"])
