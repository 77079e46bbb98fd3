"""Migration 0006 drops the unique index on audit event hashes and keeps every event as it was (SQLite
rebuilds the table; PostgreSQL drops the constraint); its downgrade puts the index back."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from verifier.base.db import alembic_config, upgrade

TABLE = "hero_audit_events"


def _hash_unique(conn) -> bool:
    insp = inspect(conn)
    cons = [c["column_names"] for c in insp.get_unique_constraints(TABLE)]
    idxs = [i["column_names"] for i in insp.get_indexes(TABLE) if i.get("unique")]
    return ["hash"] in cons + idxs


def _rows(conn) -> list[tuple]:
    return [tuple(r) for r in conn.execute(text(f"SELECT * FROM {TABLE} ORDER BY idx"))]


def test_0006_drops_the_hash_index_and_keeps_the_events(db_url):
    upgrade(db_url, "0005")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert _hash_unique(conn)
            for i in range(1, 6):
                conn.execute(text(
                    f"INSERT INTO {TABLE} (idx, created_at, action, subject, role, jti, levels, key_version, "
                    "text_sha256, outcome, detail, prev_hash, hash) VALUES (:i, '2026-11-27T00:00:00+00:00', "
                    "'verify', 's', 'moderator', 'j', '1', NULL, :t, 'ok', :d, :p, :h)"),
                    {"i": i, "t": f"{i:064x}", "d": None if i % 2 else "x", "p": f"{i - 1:064x}", "h": f"{i:064x}"})
            before = _rows(conn)
        upgrade(db_url, "0006")
        with engine.connect() as conn:
            assert not _hash_unique(conn)
            assert _rows(conn) == before
            assert inspect(conn).get_pk_constraint(TABLE)["constrained_columns"] == ["idx"]
        command.downgrade(alembic_config(db_url), "0005")
        with engine.connect() as conn:
            assert _hash_unique(conn)
            assert _rows(conn) == before
    finally:
        engine.dispose()
