"""Audit-table queries and the chain lock. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from verifier.audit.chain import AppendedEvent
from verifier.audit.models import AuditEventRow, AuditTreeNodeRow, CheckpointRow
from verifier.base.db import driver_sql

# Arbitrary constant naming the audit chain's advisory lock on PostgreSQL.
_PG_LOCK_KEY = 0x4845524F_41554454 & 0x7FFFFFFFFFFFFFFF
_PG_LOCK_SQL = f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})"  # a constant: fixed SQL to the driver


def lock_chain(s: Session) -> None:
    """Serialise appenders until the end of the transaction.

    PostgreSQL: transaction-scoped advisory lock. SQLite: every transaction is BEGIN IMMEDIATE
    already (see verifier.base.db), which holds the database write lock.
    """
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG_LOCK_SQL)


def lock_chain_and_head(s: Session) -> tuple[int, str] | None:
    """`lock_chain`, then `head_ref`, in one round trip on PostgreSQL: the two statements go in one message
    (no parameters), and each takes its own snapshot, so the head is read after the lock is held."""
    conn = s.connection()
    if conn.dialect.name != "postgresql":
        return head_ref(s)  # SQLite: BEGIN IMMEDIATE holds the write lock already
    with conn.connection.dbapi_connection.cursor() as cur:  # the same connection, in the caller's transaction
        cur.execute(f"{_PG_LOCK_SQL}; {_HEAD_SQL}")
        cur.nextset()
        r = cur.fetchone()
    return (int(r[0]), str(r[1])) if r else None


def head(s: Session) -> AuditEventRow | None:
    return s.scalars(select(AuditEventRow).order_by(AuditEventRow.idx.desc()).limit(1)).first()


_HEAD_SQL = "SELECT idx, hash FROM hero_audit_events ORDER BY idx DESC LIMIT 1"
_LATEST_CHECKPOINT_SQL = "SELECT size, note, created_at FROM hero_audit_checkpoints ORDER BY size DESC LIMIT 1"
assert AuditEventRow.__tablename__ in _HEAD_SQL and CheckpointRow.__tablename__ in _LATEST_CHECKPOINT_SQL


def head_ref(s: Session) -> tuple[int, str] | None:
    """(idx, hash) of the newest event: what an append chains on, without loading the row. Fixed SQL straight to
    the driver: this runs once per group commit, and SQLAlchemy's statement handling cost more than the query."""
    r = s.connection().exec_driver_sql(_HEAD_SQL).first()
    return (int(r[0]), str(r[1])) if r else None


_EVENT_COLUMNS = tuple(c.key for c in AuditEventRow.__table__.columns)
_event_values = attrgetter(*_EVENT_COLUMNS)  # a row's column values as one tuple, in one C call
_NODE_COLUMNS = ("level", "idx", "hash")


def _insert_many(s: Session, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
    """Appends rows once per group commit, for every event and node, the cheapest way each driver has:
    PostgreSQL COPY (psycopg formats the rows in C; SQLAlchemy's per-row parameter handling, psycopg's
    executemany pipeline or a long multi-row INSERT each cost ~0.8 ms more CPU per 16-event commit), SQLite an
    executemany of fixed SQL (the sqlite3 module loops in C)."""
    if not rows:
        return
    conn = s.connection()
    names = ", ".join(columns)
    if conn.dialect.name == "postgresql":
        raw = conn.connection.dbapi_connection  # the same connection, inside the caller's transaction
        with raw.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        conn.exec_driver_sql(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", rows)  # noqa: S608 (our table and column names)


def insert_events(s: Session, rows: Sequence[AuditEventRow | AppendedEvent]) -> None:
    _insert_many(s, AuditEventRow.__tablename__, _EVENT_COLUMNS,
                 list(map(_event_values, rows)))


def page(s: Session, after: int, limit: int) -> list[AuditEventRow]:
    q = select(AuditEventRow).where(AuditEventRow.idx > after).order_by(AuditEventRow.idx).limit(limit)
    return list(s.scalars(q))


def search(
    s: Session,
    after: int,
    limit: int,
    *,
    subject: str | None = None,
    action: str | None = None,
    level: int | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[AuditEventRow]:
    """A page of events matching every filter given; `since`/`until` are ISO-8601 UTC strings in the stored
    format (microseconds, +00:00), so they compare as text; `until` is exclusive."""
    q = select(AuditEventRow).where(AuditEventRow.idx > after)
    if subject is not None:
        q = q.where(AuditEventRow.subject == subject)
    if action is not None:
        q = q.where(AuditEventRow.action == action)
    if level is not None:
        lv = str(level)
        col = AuditEventRow.levels
        q = q.where(or_(col == lv, col.like(f"{lv},%"), col.like(f"%,{lv}"), col.like(f"%,{lv},%")))
    if since is not None:
        q = q.where(AuditEventRow.created_at >= since)
    if until is not None:
        q = q.where(AuditEventRow.created_at < until)
    return list(s.scalars(q.order_by(AuditEventRow.idx).limit(limit)))


def details_about(s: Session, subject: str, digests: Sequence[str], action: str, marker: str) -> list[tuple[str, str]]:
    """(text_sha256, detail) of `subject`'s `action` events about these texts whose detail holds `marker`
    (index ix_hero_audit_events_text_subject)."""
    if not digests:
        return []
    q = (select(AuditEventRow.text_sha256, AuditEventRow.detail)
         .where(AuditEventRow.text_sha256.in_(list(digests)), AuditEventRow.subject == subject,
                AuditEventRow.action == action, AuditEventRow.detail.contains(marker, autoescape=True)))
    return [(str(d), str(x)) for d, x in s.execute(q)]


def iterate(s: Session, batch: int = 1000, after: int = -(2**31)) -> Iterator[AuditEventRow]:
    """Every row in index order, including rows with idx <= 0 (which a valid log never has)."""
    while True:
        rows = page(s, after, batch)
        if not rows:
            return
        yield from rows
        after = rows[-1].idx


def tree_nodes(s: Session, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored hashes of several perfect subtrees [(level, idx)] in one query (fixed SQL to the driver): an
    append fetches the frontier it builds on at once instead of one indexed read per missing node."""
    if not keys:
        return {}
    conn = s.connection()
    where = " OR ".join(["(level = ? AND idx = ?)"] * len(keys))
    sql = driver_sql(conn.dialect.name, f"SELECT level, idx, hash FROM {AuditTreeNodeRow.__tablename__} WHERE {where}")  # noqa: S608 (our table; values bound)
    rows = conn.exec_driver_sql(sql, tuple(int(x) for key in keys for x in key)).all()
    return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}


def tree_node(s: Session, level: int, idx: int) -> bytes | None:
    return tree_nodes(s, [(level, idx)]).get((level, idx))


def add_tree_nodes(s: Session, nodes: list[tuple[int, int, bytes]]) -> None:
    _insert_many(s, AuditTreeNodeRow.__tablename__, _NODE_COLUMNS, nodes)


def latest_checkpoint(s: Session) -> CheckpointRow | None:
    return s.scalars(select(CheckpointRow).order_by(CheckpointRow.size.desc()).limit(1)).first()


def latest_checkpoint_ref(s: Session) -> tuple[int, str, float] | None:
    """(size, note, created_at) of the newest stored checkpoint, read without building the ORM row (fixed SQL to
    the driver, like `head_ref`: once per group commit)."""
    r = s.connection().exec_driver_sql(_LATEST_CHECKPOINT_SQL).first()
    return (int(r[0]), str(r[1]), float(r[2])) if r else None


def checkpoints(s: Session, limit: int = 100) -> list[CheckpointRow]:
    return list(s.scalars(select(CheckpointRow).order_by(CheckpointRow.size.desc()).limit(limit)))


def checkpoint_at(s: Session, size: int) -> CheckpointRow | None:
    return s.get(CheckpointRow, size)
