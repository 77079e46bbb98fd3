"""Database engine and sessions (SQLAlchemy 2), plus programmatic Alembic upgrades.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every transaction starts with
BEGIN IMMEDIATE so writers serialise instead of failing on lock upgrades. PostgreSQL goes through
psycopg 3 (`postgresql+psycopg://...`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from verifier.base.secretfile import FILE_MODE, private_dir, restrict_files
from verifier.base.settings import REPO_ROOT

SQLITE_BUSY_TIMEOUT_MS = 30_000


class Base(DeclarativeBase):
    pass


SQLITE_SYNCHRONOUS = ("FULL", "NORMAL")


def make_engine(url: str, sqlite_synchronous: str = "FULL", *, pool_size: int = 10, max_overflow: int = 20,
                pgbouncer: bool = False) -> Engine:
    """`sqlite_synchronous`: FULL (default) fsyncs the WAL at every commit; NORMAL does not (a commit survives a
    crash of the process, not of the machine: docs/performance.md), which makes a commit ~10x cheaper.
    PostgreSQL: `pool_size` + `max_overflow` connections per process (HERO_DB_POOL_SIZE / HERO_DB_MAX_OVERFLOW);
    `pgbouncer`: no server-side prepared statements (psycopg's `prepare_threshold=None`), which PgBouncer's
    transaction pooling would hand to another backend."""
    if sqlite_synchronous not in SQLITE_SYNCHRONOUS:
        raise ValueError(f"sqlite synchronous must be one of {SQLITE_SYNCHRONOUS}")
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            _private_sqlite_file(Path(u.database).expanduser())
        engine = create_engine(
            u, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):  # pragma: no cover - exercised indirectly
            dbapi_conn.isolation_level = None  # let us issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA secure_delete=ON")  # freed space is zeroed: deleted key rows leave no bytes
            cur.execute(f"PRAGMA synchronous={sqlite_synchronous}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn):  # pragma: no cover
            # Readers (snapshot()) take no lock: in WAL mode they see one consistent snapshot and never
            # block writers; everything else serialises on the write lock from its first statement.
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("hero_snapshot") else "BEGIN IMMEDIATE")

        return engine
    connect_args = {"prepare_threshold": None} if pgbouncer and u.get_driver_name() == "psycopg" else {}
    engine = create_engine(u, pool_size=pool_size, max_overflow=max_overflow, connect_args=connect_args)
    _ping_when_idle(engine)
    return engine


PING_AFTER_IDLE_S = 1.0  # a pooled PostgreSQL connection unused this long is pinged before it is handed out


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's `pool_pre_ping`, but only for connections that sat in the pool PING_AFTER_IDLE_S or more.

    Why: the ping is a round trip at every checkout, and the hot path checks out twice per batch (the key-epoch
    read, the audit transaction), two of its ten round trips under load, when connections never idle long
    enough to go stale. A connection the server dropped while it idled (restart, failover, idle timeout of a
    proxy) fails the ping and is replaced, as with `pool_pre_ping` (DisconnectionError: the pool retries)."""

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_conn, record) -> None:
        record.info["hero_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_conn, record, _proxy) -> None:
        since = record.info.pop("hero_idle_since", None)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return  # just connected, or back in the pool a moment ago
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError("connection lost while idle in the pool") from exc


def _private_sqlite_file(path: Path) -> None:
    """Creates the database file 0600 before SQLite does (its -wal/-shm files copy that mode) and
    tightens an existing one: it holds job results that name people and the audit log."""
    if not path.parent.exists():
        private_dir(path.parent)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE)
    os.close(fd)
    restrict_files([path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")])


def driver_sql(dialect: str, sql: str) -> str:
    """`sql` written with `?` placeholders, in the driver's parameter style (SQLite `?`, psycopg `%s`): for the
    few fixed statements the hot path hands straight to the driver."""
    return sql if dialect == "sqlite" else sql.replace("?", "%s")


class Database:
    """Engine + session factory for one URL."""

    def __init__(self, url: str, sqlite_synchronous: str = "FULL", **pool) -> None:
        """`pool`: `make_engine`'s PostgreSQL pool options (pool_size, max_overflow, pgbouncer)."""
        self.url = url
        self.engine = make_engine(url, sqlite_synchronous, **pool)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._snapshot_engine = self.engine.execution_options(hero_snapshot=True)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessions() as s, s.begin():
            yield s

    @contextmanager
    def snapshot(self) -> Iterator[Session]:
        """Read-only transaction on one consistent snapshot that never blocks (or waits for) writers.

        SQLite: a deferred BEGIN in WAL mode. PostgreSQL: REPEATABLE READ, READ ONLY (MVCC snapshot).
        """
        with self.sessions(bind=self._snapshot_engine) as s:
            try:
                if self.dialect == "postgresql":
                    s.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
                yield s
            finally:
                s.rollback()

    def scalar(self, sql: str, *params: object) -> object:
        """The first column of the first row of one small read, straight through the driver: no transaction
        object, no statement compilation (SQLite ~18 us against ~260 us through a Core connection; PostgreSQL saves
        about a round trip). For the hot path's per-batch checks. `sql` takes `?` placeholders. SQLite runs
        it in autocommit (one statement: one consistent snapshot), and so does PostgreSQL: without it the
        driver's BEGIN and the pool's ROLLBACK on return were two more round trips than the query itself."""
        raw = self.engine.raw_connection()
        try:
            pg = raw.driver_connection if self.dialect == "postgresql" else None
            if pg is not None:
                pg.autocommit = True  # a connection fresh from the pool is idle: allowed, and no round trip
            try:
                cur = raw.cursor()
                try:
                    cur.execute(driver_sql(self.dialect, sql), params)
                    row = cur.fetchone()
                finally:
                    cur.close()
            finally:
                if pg is not None:
                    try:
                        pg.autocommit = False  # as the pool and every session expect it
                    except Exception:
                        raw.invalidate()  # broken meanwhile: never reused in autocommit
        finally:
            raw.close()
        return None if row is None else row[0]

    def purge_deleted(self, table: str, attempts: int = 50) -> bool:
        """Physically removes old row versions of `table` after a destruction; True when nothing is left.

        SQLite (secure_delete on): checkpoint the WAL and truncate it, so no older page image survives
        (retried while readers hold old snapshots). PostgreSQL: VACUUM FULL rewrites the table, leaving
        no dead tuple holding the old bytes. Backups and PostgreSQL's own WAL archive are out of reach:
        see docs/service.md (key destruction).
        """
        if self.dialect == "sqlite":
            for _ in range(attempts):
                raw = self.engine.raw_connection()
                try:
                    busy, _log, _done = raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    raw.close()
                if busy == 0:
                    return True
                time.sleep(0.1)
            return False
        if not table.isidentifier():
            raise ValueError(f"not a table name: {table!r}")
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'VACUUM FULL "{table}"'))
        return True

    def ping(self) -> bool:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True

    def dispose(self) -> None:
        self.engine.dispose()


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config(str(REPO_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    cfg.attributes["url"] = url
    return cfg


class SchemaNotCurrent(RuntimeError):
    """The database is not at this version's migration head (message: one line, what to run)."""


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() or ""


def check_schema(db: Database) -> None:
    """Raises SchemaNotCurrent unless the database is migrated to head."""
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    head = head_revision()
    if current != head:
        state = "not migrated" if current is None else f"at revision {current}"
        raise SchemaNotCurrent(f"the database is {state} (this version needs {head}); run `hero db upgrade`")


_upgrade_lock = threading.Lock()


def upgrade(url: str, revision: str = "head") -> None:
    """`alembic upgrade head` for `url`, in process."""
    from alembic import command

    with _upgrade_lock:
        command.upgrade(alembic_config(url), revision)
