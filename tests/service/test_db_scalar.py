"""`Database.scalar`, the hot path's per-batch read (the key epoch): one statement in autocommit, so on
PostgreSQL no BEGIN and no ROLLBACK round trip, and the connection goes back to the pool as it came."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from verifier.db import Database, upgrade


def _frontend_queries(trace: str) -> list[str]:
    return [line.split("\t")[3].strip() for line in trace.splitlines()
            if line.startswith("F\t") and "\tQuery\t" in line]


def test_scalar_leaves_connections_transactional(db_url):
    upgrade(db_url)
    db = Database(db_url)
    try:
        for _ in range(3):
            assert db.scalar("SELECT epoch FROM hero_key_epochs WHERE profile = ?", "nope") is None
        db.engine.pool.dispose()  # one pooled connection at most from here
        db.scalar("SELECT 1")
        with pytest.raises(RuntimeError), db.session() as s:  # the same connection: must still roll back
            s.execute(text("INSERT INTO hero_key_epochs (profile, epoch) VALUES ('p', 1)"))
            raise RuntimeError
        assert db.scalar("SELECT count(*) FROM hero_key_epochs WHERE profile = ?", "p") == 0
    finally:
        db.dispose()


def test_scalar_on_postgresql_sends_no_begin_or_rollback(db_url, tmp_path):
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL round trips")
    import psycopg.pq

    upgrade(db_url)
    db = Database(db_url)
    path = tmp_path / "libpq.trace"
    try:
        db.engine.pool.dispose()
        raw = db.engine.raw_connection()
        pgconn = raw.driver_connection.pgconn
        raw.close()  # back to the pool: the next checkout gets it
        with path.open("w") as f:
            pgconn.trace(f.fileno())
            pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
            assert db.scalar("SELECT epoch FROM hero_key_epochs WHERE profile = ?", "nope") is None
            pgconn.untrace()
        sent = _frontend_queries(path.read_text())
        assert not any("BEGIN" in q or "ROLLBACK" in q for q in sent), sent
    finally:
        db.dispose()


def _pg_only(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL connection pool")


def test_a_connection_dropped_while_idle_is_replaced_not_failed(db_url, monkeypatch):
    _pg_only(db_url)
    import psycopg

    from verifier import db as dbmod

    monkeypatch.setattr(dbmod, "PING_AFTER_IDLE_S", 0.05)
    upgrade(db_url)
    db = Database(db_url)
    try:
        db.engine.pool.dispose()
        pid = db.scalar("SELECT pg_backend_pid()")
        base = db_url.replace("postgresql+psycopg://", "postgresql://").split("?")[0]
        with psycopg.connect(base, autocommit=True) as admin:  # the server drops it (restart, proxy timeout)
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.2)
        new = db.scalar("SELECT pg_backend_pid()")  # pinged on checkout, found dead, replaced: no error
        assert new != pid
    finally:
        db.dispose()


def test_a_connection_back_in_the_pool_a_moment_ago_is_not_pinged(db_url, tmp_path, monkeypatch):
    _pg_only(db_url)
    import psycopg.pq

    from verifier import db as dbmod

    upgrade(db_url)
    db = Database(db_url)
    path = tmp_path / "libpq.trace"
    try:
        db.engine.pool.dispose()
        raw = db.engine.raw_connection()
        pgconn = raw.driver_connection.pgconn
        raw.close()
        with path.open("w") as f:
            pgconn.trace(f.fileno())
            pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
            db.scalar("SELECT 1")  # at once: no ping
            monkeypatch.setattr(dbmod, "PING_AFTER_IDLE_S", 0.0)
            db.scalar("SELECT 2")  # "idle" long enough now: pinged first
            pgconn.untrace()
        assert _frontend_queries(path.read_text()) == ['"SELECT 1"', '";"', '"SELECT 2"']
    finally:
        db.dispose()
