"""Audit-table queries and the chain lock. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from verifier.audit.chain import AppendedEvent
from verifier.audit.models import AuditEventRow, AuditTreeNodeRow, CheckpointRow

# Arbitrary constant naming the audit chain's advisory lock on PostgreSQL.
_PG_LOCK_KEY = 0x4845524F_41554454 & 0x7FFFFFFFFFFFFFFF


def lock_chain(s: Session) -> None:
    """Serialise appenders until the end of the transaction.

    PostgreSQL: transaction-scoped advisory lock. SQLite: every transaction is BEGIN IMMEDIATE
    already (see verifier.db), which holds the database write lock.
    """
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


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


def insert_events(s: Session, rows: Sequence[AuditEventRow | AppendedEvent]) -> None:
    """Inserts the rows with one executemany (the ORM unit of work costs ~10x more per row)."""
    if rows:
        s.execute(AuditEventRow.__table__.insert(), [{k: getattr(r, k) for k in _EVENT_COLUMNS} for r in rows])


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


def iterate(s: Session, batch: int = 1000, after: int = -(2**31)) -> Iterator[AuditEventRow]:
    """Every row in index order, including rows with idx <= 0 (which a valid log never has)."""
    while True:
        rows = page(s, after, batch)
        if not rows:
            return
        yield from rows
        after = rows[-1].idx


def tree_node(s: Session, level: int, idx: int) -> bytes | None:
    q = select(AuditTreeNodeRow.hash).where(AuditTreeNodeRow.level == level, AuditTreeNodeRow.idx == idx)
    return s.connection().execute(q).scalar()


def add_tree_nodes(s: Session, nodes: list[tuple[int, int, bytes]]) -> None:
    if nodes:
        s.execute(AuditTreeNodeRow.__table__.insert(), [{"level": lv, "idx": i, "hash": h} for lv, i, h in nodes])


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
