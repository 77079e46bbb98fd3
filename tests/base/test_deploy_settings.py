"""Settings a multi-node deployment needs: the PostgreSQL pool size, PgBouncer's transaction pooling (no
server-side prepared statements), and rate-limit storage URLs for Redis Sentinel / Cluster."""

from __future__ import annotations

from sqlalchemy import text

from tests.helpers.service import make_settings
from verifier.process import open_database


def test_pool_size_and_pgbouncer_mode_reach_the_engine(pg_url, tmp_path):
    s = make_settings(tmp_path, pg_url, db_pool_size=3, db_max_overflow=1, db_pgbouncer=True)
    db = open_database(s)
    try:
        assert db.engine.pool.size() == 3 and db.engine.pool._max_overflow == 1
        with db.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw.prepare_threshold is None  # psycopg never prepares: safe behind a transaction pooler
            for _ in range(8):  # the same statement again and again: still no server-side prepared statement
                conn.execute(text("SELECT 1"))
            assert conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar() == 0
    finally:
        db.dispose()
    plain = open_database(make_settings(tmp_path, pg_url))
    try:
        assert plain.engine.pool.size() == 10
        with plain.engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold == 5  # psycopg's default, unchanged
    finally:
        plain.dispose()


def test_rate_limit_urls_name_their_limits_storage():
    from limits.storage import RedisSentinelStorage, RedisStorage

    from verifier.base.ratelimit import RedisCounter

    assert isinstance(RedisCounter("redis://127.0.0.1:6379/15").storage, RedisStorage)
    # Sentinel connects on first use: building the counter needs no running sentinel
    assert isinstance(RedisCounter("redis+sentinel://127.0.0.1:26379/hero").storage, RedisSentinelStorage)
