"""Queries on job and job-item rows. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from verifier.jobs.models import JobItemRow, JobRow

FINAL = ("done", "failed")
UNFINISHED = ("queued", "running")



class ItemRef(NamedTuple):
    """One claimed job item: its row id, its index in the job, its sealed text and the text's digest."""

    id: int
    idx: int
    nonce: bytes
    ciphertext: bytes
    text_sha256: str

    def __repr__(self) -> str:  # the sealed text stays out of logs
        return f"ItemRef(id={self.id}, idx={self.idx})"


_ITEMS = JobItemRow.__table__  # Core statements: the ORM's per-statement bookkeeping is not needed here


def insert_items(s: Session, rows: Sequence[dict], chunk: int = 1000) -> None:
    for k in range(0, len(rows), chunk):
        s.execute(_ITEMS.insert(), list(rows[k : k + chunk]))


def claimable_item_ids(s: Session, job_id: str, now: float, n: int, start_idx: int = 0) -> tuple[list[int], int]:
    """Up to n items whose claim lease expired or that are pending, and where the next pending scan may start.

    Expired claims come first, then pending items in input order from `start_idx` (what this drain claimed
    last, plus one), then pending items before it (only when short: normally none are left behind). Each
    query reads O(n) index entries: a scan from the job's first item walked every done item per batch
    (O(N^2) over a job; 10 ms per claim at 90,000 of 100,000 on SQLite).

    PostgreSQL: FOR UPDATE SKIP LOCKED, so concurrent workers take disjoint batches without waiting.
    SQLite: every transaction is BEGIN IMMEDIATE (one writer), which gives the same guarantee.
    """
    pg = s.get_bind().dialect.name == "postgresql"

    def take(q, k: int) -> list:
        q = q.limit(k)
        return list(s.execute(q.with_for_update(skip_locked=True) if pg else q).all())

    mine = select(JobItemRow.id, JobItemRow.idx).where(JobItemRow.job_id == job_id)
    # ORDER BY id (ids follow idx within a job) lets SQLite search the (job_id, status) index, whose entries end
    # with the row id, instead of walking the job's items in idx order.
    expired = mine.where(JobItemRow.status == "claimed", JobItemRow.lease_until < now).order_by(JobItemRow.id)
    ids = [r[0] for r in take(expired, n)]
    pending = mine.where(JobItemRow.status == "pending").order_by(JobItemRow.idx)
    scans = [pending.where(JobItemRow.idx >= start_idx)]
    if start_idx:  # normally none: only items a rolled-back claim left behind
        scans.append(pending.where(JobItemRow.idx < start_idx))
    nxt = start_idx
    for q in scans:
        if len(ids) >= n:
            break
        got = take(q, n - len(ids))
        if got:
            ids += [r[0] for r in got]
            nxt = got[-1][1] + 1
    return ids, nxt


def claim_items(
    s: Session, ids: Sequence[int], token: str, worker: str, lease_until: float
) -> tuple[list[ItemRef], int]:
    """Mark the items claimed with `token`; their refs in input order and the most attempts among them, this one
    included (one UPDATE ... RETURNING: no second read, no per-batch max-attempts transaction)."""
    rows = s.execute(
        update(_ITEMS)
        .where(_ITEMS.c.id.in_(ids))
        .values(status="claimed", claim_token=token, claimed_by=worker[:256], lease_until=lease_until,
                attempts=_ITEMS.c.attempts + 1)
        .returning(_ITEMS.c.id, _ITEMS.c.idx, _ITEMS.c.nonce, _ITEMS.c.ciphertext, _ITEMS.c.text_sha256,
                   _ITEMS.c.attempts)
    ).all()
    rows.sort(key=lambda r: r[1])
    return [ItemRef(*r[:5]) for r in rows], max((r[5] for r in rows), default=0)


def release_items(s: Session, token: str) -> None:
    """Hand a claim's items back untried (pending, this attempt not counted): the KEK was unreachable."""
    s.execute(
        update(_ITEMS)
        .where(_ITEMS.c.claim_token == token, _ITEMS.c.status == "claimed")
        .values(status="pending", claim_token=None, claimed_by=None, lease_until=None,
                attempts=_ITEMS.c.attempts - 1)
    )


def start_job(s: Session, job_id: str, now: float) -> None:
    s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued").values(status="running",
                                                                                          updated_at=now))


_STORE = (
    update(_ITEMS)
    .where(_ITEMS.c.id == bindparam("b_id"), _ITEMS.c.status == "claimed",
           _ITEMS.c.claim_token == bindparam("b_token"))
    .values(status="done", result=bindparam("b_result"), done_at=bindparam("b_now"), ciphertext=None, nonce=None,
            claim_token=None, lease_until=None)
)


def store_results(s: Session, token: str, results: Sequence[tuple[int, str]], now: float) -> list[int]:
    """Write the results of the items still claimed with `token` (never a done item); the ids written, in order.

    One locking read and one executemany UPDATE per batch: an ORM UPDATE per item cost ~0.4 ms of CPU each.
    The read takes the row locks first (PostgreSQL: FOR UPDATE, in id order), so no other claim can take an
    item between the read and the write; SQLite's BEGIN IMMEDIATE already holds the only write lock.
    """
    if not results:
        return []
    ids = [i for i, _ in results]
    q = (
        select(JobItemRow.id)
        .where(JobItemRow.id.in_(ids), JobItemRow.status == "claimed", JobItemRow.claim_token == token)
        .order_by(JobItemRow.id)
    )
    if s.get_bind().dialect.name == "postgresql":
        q = q.with_for_update()
    held = set(s.scalars(q))
    rows = [{"b_id": i, "b_token": token, "b_result": r, "b_now": now} for i, r in results if i in held]
    if rows:
        conn = s.connection()
        n = conn.execute(_STORE, rows).rowcount
        if conn.dialect.supports_sane_multi_rowcount and n != len(rows):  # cannot happen under the row locks
            raise RuntimeError(f"job items changed under their lock ({n} of {len(rows)} written)")
    return [i for i in ids if i in held]


def add_progress(s: Session, job_id: str, n: int, now: float) -> None:
    s.execute(update(JobRow).where(JobRow.id == job_id).values(done=JobRow.done + n, updated_at=now))


def fail_job(s: Session, job_id: str, error: str, now: float) -> None:
    s.execute(
        update(JobRow).where(JobRow.id == job_id, JobRow.status.not_in(FINAL))
        .values(status="failed", error=error[:500], updated_at=now)
    )


def earliest_lease(s: Session, job_id: str) -> float | None:
    return s.scalar(
        select(func.min(JobItemRow.lease_until)).where(JobItemRow.job_id == job_id, JobItemRow.status == "claimed")
    )


def pending_count(s: Session, job_id: str) -> int:
    return int(
        s.scalar(
            select(func.count()).select_from(JobItemRow)
            .where(JobItemRow.job_id == job_id, JobItemRow.status == "pending")
        ) or 0
    )


def stale_job_ids(s: Session, cutoff: float, limit: int) -> list[str]:
    """Unfinished jobs nobody touched (claimed, completed, enqueued) since `cutoff`, oldest first."""
    return list(
        s.scalars(
            select(JobRow.id)
            .where(
                JobRow.status.in_(UNFINISHED),
                JobRow.updated_at < cutoff,
                or_(JobRow.enqueued_at.is_(None), JobRow.enqueued_at < cutoff),
            )
            .order_by(JobRow.created_at)
            .limit(limit)
        )
    )


def unfinished_job_ids(s: Session, limit: int) -> list[str]:
    q = select(JobRow.id).where(JobRow.status.in_(UNFINISHED)).order_by(JobRow.created_at).limit(limit)
    return list(s.scalars(q))


def items_left(s: Session, ids: Sequence[str]) -> dict[str, int]:
    q = select(JobRow.id, JobRow.total - JobRow.done).where(JobRow.id.in_(list(ids)))
    return {r[0]: int(r[1]) for r in s.execute(q)}


def mark_enqueued(s: Session, ids: Sequence[str], now: float) -> None:
    s.execute(update(JobRow).where(JobRow.id.in_(ids)).values(enqueued_at=now))


def results_in_order(s: Session, job_id: str) -> list[str | None]:
    q = select(JobItemRow.result).where(JobItemRow.job_id == job_id).order_by(JobItemRow.idx)
    return list(s.scalars(q))


def results_page(s: Session, job_id: str, start: int, limit: int) -> list[tuple[int, str | None]]:
    """(idx, result) of items start.. in input order, at most `limit` (a range on the (job_id, idx) key)."""
    q = (select(JobItemRow.idx, JobItemRow.result)
         .where(JobItemRow.job_id == job_id, JobItemRow.idx >= start).order_by(JobItemRow.idx).limit(limit))
    return [(int(r[0]), r[1]) for r in s.execute(q)]


def job_for_key(s: Session, owner: tuple[str, str, str], key: str) -> tuple[str, str | None] | None:
    iss, sub, role = owner
    row = s.execute(
        select(JobRow.id, JobRow.request_sha256).where(
            JobRow.owner_iss == iss, JobRow.owner_sub == sub, JobRow.role == role, JobRow.idempotency_key == key)
    ).first()
    return None if row is None else (row[0], row[1])


def keys_handed_json(s: Session, job_id: str) -> str | None:
    return s.scalar(select(JobRow.keys_handed).where(JobRow.id == job_id))


def owner_of(s: Session, job_id: str):
    """(owner_iss, owner_sub, role, max_level) of a job, or None: the only columns read before the owner check."""
    return s.execute(
        select(JobRow.owner_iss, JobRow.owner_sub, JobRow.role, JobRow.max_level).where(JobRow.id == job_id)
    ).first()


def list_jobs(s: Session, owner: tuple[str, str, str] | None, max_level: int, limit: int, offset: int) -> list[JobRow]:
    """Jobs newest first; `owner` = (issuer, subject, role) or None for every owner; never a job whose level
    exceeds `max_level` (the reader's)."""
    q = select(JobRow).where(JobRow.max_level <= max_level)
    if owner is not None:
        iss, sub, role = owner
        q = q.where(JobRow.owner_iss == iss, JobRow.owner_sub == sub, JobRow.role == role)
    return list(s.scalars(q.order_by(JobRow.created_at.desc(), JobRow.id).offset(offset).limit(limit)))
