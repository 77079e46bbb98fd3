"""Queries on job and job-item rows. Callers own the transaction."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from verifier.jobs.models import JobItemRow, JobRow

FINAL = ("done", "failed")
UNFINISHED = ("queued", "running")

ItemRef = tuple[int, int, bytes, bytes, str]  # (item id, idx, nonce, ciphertext, text sha256)


def insert_items(s: Session, rows: Sequence[dict], chunk: int = 1000) -> None:
    for k in range(0, len(rows), chunk):
        s.execute(JobItemRow.__table__.insert(), list(rows[k : k + chunk]))


def claimable_item_ids(s: Session, job_id: str, now: float, n: int) -> list[int]:
    """Up to n items that are pending or whose claim lease expired, in input order.

    PostgreSQL: FOR UPDATE SKIP LOCKED, so concurrent workers take disjoint batches without waiting.
    SQLite: every transaction is BEGIN IMMEDIATE (one writer), which gives the same guarantee.
    """
    q = (
        select(JobItemRow.id)
        .where(
            JobItemRow.job_id == job_id,
            or_(JobItemRow.status == "pending", and_(JobItemRow.status == "claimed", JobItemRow.lease_until < now)),
        )
        .order_by(JobItemRow.idx)
        .limit(n)
    )
    if s.get_bind().dialect.name == "postgresql":
        q = q.with_for_update(skip_locked=True)
    return list(s.scalars(q))


def mark_claimed(s: Session, ids: Sequence[int], token: str, worker: str, lease_until: float) -> None:
    s.execute(
        update(JobItemRow)
        .where(JobItemRow.id.in_(ids))
        .values(status="claimed", claim_token=token, claimed_by=worker[:256], lease_until=lease_until,
                attempts=JobItemRow.attempts + 1)
    )


def start_job(s: Session, job_id: str, now: float) -> None:
    s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued").values(status="running",
                                                                                          updated_at=now))


def item_refs(s: Session, ids: Sequence[int]) -> list[ItemRef]:
    rows = s.execute(
        select(JobItemRow.id, JobItemRow.idx, JobItemRow.nonce, JobItemRow.ciphertext, JobItemRow.text_sha256)
        .where(JobItemRow.id.in_(ids))
        .order_by(JobItemRow.idx)
    ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def max_attempts(s: Session, ids: Sequence[int]) -> int:
    return int(s.scalar(select(func.max(JobItemRow.attempts)).where(JobItemRow.id.in_(ids))) or 0)


def store_result(s: Session, item_id: int, token: str, result_json: str, now: float) -> bool:
    """Write an item's result only if it is still claimed with `token` (never a done item)."""
    r = s.execute(
        update(JobItemRow)
        .where(JobItemRow.id == item_id, JobItemRow.status == "claimed", JobItemRow.claim_token == token)
        .values(status="done", result=result_json, done_at=now, ciphertext=None, nonce=None, claim_token=None,
                lease_until=None)
    )
    return r.rowcount == 1


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


def mark_enqueued(s: Session, ids: Sequence[str], now: float) -> None:
    s.execute(update(JobRow).where(JobRow.id.in_(ids)).values(enqueued_at=now))


def results_in_order(s: Session, job_id: str) -> list[str | None]:
    q = select(JobItemRow.result).where(JobItemRow.job_id == job_id).order_by(JobItemRow.idx)
    return list(s.scalars(q))


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
