"""Migration 0014 adds `hero_audit_events.canon` and keeps every event as it was (NULL: Python json's form, so the
events written before still verify); its downgrade drops the column, and refuses while any event is marked (the
older schema could neither hold nor verify an RFC 8785 event)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text

from tests.audit.helpers import V1, load_v1, new_events, v1_signer
from verifier.audit.service import record_with_receipts, verify_chain
from verifier.base.db import Database, alembic_config, upgrade

TABLE = "hero_audit_events"


def _rows(db: Database) -> list[tuple]:
    with db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            f"SELECT idx, created_at, action, subject, detail, issuer, prev_hash, hash FROM {TABLE} ORDER BY idx"))]


def _columns(db: Database) -> set[str]:
    with db.engine.connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns(TABLE)}


def test_0014_adds_the_marker_keeps_the_events_and_downgrades_only_without_marked_ones(db_url):
    upgrade(db_url, "0013")
    db = Database(db_url)
    try:
        assert "canon" not in _columns(db)
        load_v1(db)  # the vector's events, as the code before wrote them
        before = _rows(db)
        upgrade(db_url, "0014")
        assert _rows(db) == before
        with db.engine.connect() as conn:
            assert conn.execute(text(f"SELECT canon FROM {TABLE}")).scalars().all() == [None] * 3
        assert verify_chain(db, V1["vkey"]).valid
        command.downgrade(alembic_config(db_url), "0013")  # nothing marked yet: the column goes, the events stay
        assert "canon" not in _columns(db) and _rows(db) == before
        upgrade(db_url)
        record_with_receipts(db, new_events(), v1_signer(), 0.0)
        after = _rows(db)
        with pytest.raises(RuntimeError, match="3 audit events are canonicalised with RFC 8785"):
            command.downgrade(alembic_config(db_url), "0013")
        assert "canon" in _columns(db) and _rows(db) == after
        report = verify_chain(db, V1["vkey"])
        assert report.valid and report.events == 6, report
    finally:
        db.dispose()
