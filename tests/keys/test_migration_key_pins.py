"""Migration 0011 adds the key-time pins (tokenizer fingerprint, profile digest) to key versions: rows made before
keep NULL in both and everything else; its downgrade drops them and keeps the rows and their constraints."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from verifier.base.db import alembic_config, upgrade

TABLE = "hero_key_versions"


def _rows(conn) -> list[tuple]:
    return [tuple(r) for r in conn.execute(text(f"SELECT id, profile, level, seq, version, status, ciphertext "
                                                f"FROM {TABLE} ORDER BY id"))]


def test_0011_adds_the_pins_and_keeps_the_versions(db_url):
    upgrade(db_url, "0010")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            for i in (1, 2):
                conn.execute(text(
                    f"INSERT INTO {TABLE} (profile, level, seq, version, status, kek_id, wrapped_dek, nonce, "
                    "ciphertext, created_at, status_changed_at) VALUES ('own', :lv, 1, :v, 'active', 'k1', :b, :b, "
                    ":b, '2026-12-01T00:00:00+00:00', '2026-12-01T00:00:00+00:00')"),
                    {"lv": i, "v": f"l{i}-v1", "b": bytes([i]) * 12})
            before = _rows(conn)
            checks = inspect(conn).get_check_constraints(TABLE)
        upgrade(db_url, "0011")
        with engine.connect() as conn:
            assert _rows(conn) == before
            pins = conn.execute(text(f"SELECT tokenizer_fingerprint, profile_digest FROM {TABLE}")).all()
            assert [tuple(p) for p in pins] == [(None, None), (None, None)]
        command.downgrade(alembic_config(db_url), "0010")
        with engine.connect() as conn:
            assert _rows(conn) == before
            cols = {c["name"] for c in inspect(conn).get_columns(TABLE)}
            assert not {"tokenizer_fingerprint", "profile_digest"} & cols
            assert inspect(conn).get_check_constraints(TABLE) == checks
    finally:
        engine.dispose()
