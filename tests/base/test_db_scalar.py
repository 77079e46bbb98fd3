"""`Database.scalar`, the hot path's per-batch read (the key epoch): one statement in autocommit, so on
PostgreSQL no BEGIN and no ROLLBACK round trip, and the connection goes back to the pool as it came. The
PostgreSQL pool pings a connection only when it idled a while, and replaces one the server dropped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import text

from verifier.base import db as dbmod
from verifier.base.db import Database, upgrade


@pytest.fixture
def pg_db(pg_url) -> Iterator[Database]:
    """A migrated PostgreSQL database with an empty pool."""
    upgrade(pg_url)
    db = Database(pg_url)
    db.engine.pool.dispose()
    try:
        yield db
    finally:
        db.dispose()


@contextmanager
def _sent_queries(db: Database, tmp_path) -> Iterator[list[str]]:
    """The simple-protocol queries libpq sends on the pool's (one) connection inside the block."""
    import psycopg.pq

    raw = db.engine.raw_connection()
    pgconn = raw.driver_connection.pgconn
    raw.close()  # back to the pool: the next checkout gets it
    path = tmp_path / "libpq.trace"
    sent: list[str] = []
    with path.open("w") as f:
        pgconn.trace(f.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield sent
        finally:
            pgconn.untrace()
    sent += [line.split("\t")[3].strip() for line in path.read_text().splitlines()
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


def test_scalar_on_postgresql_sends_no_begin_or_rollback(pg_db, tmp_path):
    with _sent_queries(pg_db, tmp_path) as sent:
        assert pg_db.scalar("SELECT epoch FROM hero_key_epochs WHERE profile = ?", "nope") is None
    assert not any("BEGIN" in q or "ROLLBACK" in q for q in sent), sent


def test_a_connection_dropped_while_idle_is_replaced_not_failed(pg_db, pg_url, monkeypatch):
    import psycopg

    monkeypatch.setattr(dbmod, "PING_AFTER_IDLE_S", 0.05)
    pid = pg_db.scalar("SELECT pg_backend_pid()")
    base = pg_url.replace("postgresql+psycopg://", "postgresql://").split("?")[0]
    with psycopg.connect(base, autocommit=True) as admin:  # the server drops it (restart, proxy timeout)
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 120  # until it is gone (polled: a bound, not a speed target)
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the backend was not terminated"
            time.sleep(0.01)
    time.sleep(0.1)  # idle longer than the 0.05 s ping threshold
    assert pg_db.scalar("SELECT pg_backend_pid()") != pid  # pinged on checkout, found dead, replaced: no error


def test_a_connection_back_in_the_pool_a_moment_ago_is_not_pinged(pg_db, tmp_path, monkeypatch):
    with _sent_queries(pg_db, tmp_path) as sent:
        pg_db.scalar("SELECT 1")  # at once: no ping
        monkeypatch.setattr(dbmod, "PING_AFTER_IDLE_S", 0.0)
        pg_db.scalar("SELECT 2")  # "idle" long enough now: pinged first
    assert sent == ['"SELECT 1"', '";"', '"SELECT 2"']
