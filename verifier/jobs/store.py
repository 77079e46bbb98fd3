"""Durable decode jobs: creation (texts sealed at rest), claiming with leases, idempotent completion.

Texts are sealed with AES-256-GCM under a per-job data key wrapped by the KEK provider; each item's
associated data binds (job id, index), so ciphertexts cannot be swapped between items or jobs. Brokers
only ever see job ids.

Claiming: a drain takes up to N items that are pending or whose claim lease expired. On PostgreSQL this
is `SELECT ... FOR UPDATE SKIP LOCKED`, so concurrent workers take disjoint batches without waiting; on
SQLite every transaction is BEGIN IMMEDIATE (one writer), which gives the same guarantee. Each claim has
a random token; completion writes an item only if it is still claimed with that token, and never
touches an item that is done, so a re-delivered message or a worker whose lease expired cannot
overwrite a result. Results, the progress counter and the audit events commit in one transaction.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import and_, func, or_, select, update

from verifier.audit.service import AuditEvent, append, text_digest
from verifier.db import Database
from verifier.jobs.models import JobItemRow, JobRow
from verifier.keys.kek import KekError, KekProvider

FINAL = ("done", "failed")


def _job_aad(job_id: str) -> bytes:
    return f"hero/job/v1|job={job_id}".encode()


def _item_aad(job_id: str, idx: int) -> bytes:
    return f"hero/jobitem/v1|job={job_id}|idx={idx}".encode()


@dataclass(frozen=True)
class JobInfo:
    id: str
    owner_sub: str
    role: str
    jti: str
    max_level: int
    profile: str
    alpha: float
    status: str
    kek_id: str
    wrapped_dek: bytes = field(repr=False)

    @classmethod
    def of(cls, r: JobRow) -> JobInfo:
        return cls(r.id, r.owner_sub, r.role, r.jti, r.max_level, r.profile, r.alpha, r.status, r.kek_id, r.wrapped_dek)


@dataclass(repr=False)
class Claim:
    job: JobInfo
    token: str
    items: list[tuple[int, int, bytes, bytes, str]]  # (item id, idx, nonce, ciphertext, text sha256)

    def __repr__(self) -> str:
        return f"Claim(job={self.job.id!r}, items={len(self.items)})"


def create_job(
    db: Database,
    kek: KekProvider,
    *,
    owner_sub: str,
    role: str,
    jti: str,
    profile: str,
    max_level: int,
    alpha: float,
    texts: Sequence[str],
) -> str:
    job_id = str(uuid.uuid4())
    dek = secrets.token_bytes(32)
    kek_id, wrapped = kek.wrap(dek, _job_aad(job_id))
    aead = AESGCM(dek)
    now = time.time()
    with db.session() as s:
        s.add(
            JobRow(
                id=job_id, owner_sub=owner_sub, role=role, jti=jti, max_level=max_level, profile=profile,
                alpha=alpha, status="queued", total=len(texts), done=0, created_at=now, updated_at=now,
                kek_id=kek_id, wrapped_dek=wrapped,
            )
        )
        s.flush()
        rows = []
        for i, t in enumerate(texts):
            nonce = secrets.token_bytes(12)
            rows.append(
                {
                    "job_id": job_id, "idx": i, "nonce": nonce,
                    "ciphertext": aead.encrypt(nonce, t.encode("utf-8"), _item_aad(job_id, i)),
                    "text_sha256": text_digest(t), "status": "pending", "attempts": 0,
                }
            )
        for k in range(0, len(rows), 1000):
            s.execute(JobItemRow.__table__.insert(), rows[k : k + 1000])
    return job_id


def open_texts(kek: KekProvider, claim: Claim) -> list[str]:
    job = claim.job
    dek = kek.unwrap(job.kek_id, job.wrapped_dek, _job_aad(job.id))
    aead = AESGCM(dek)
    try:
        return [aead.decrypt(n, ct, _item_aad(job.id, idx)).decode("utf-8") for _, idx, n, ct, _ in claim.items]
    except InvalidTag:
        raise KekError("job text failed authentication (tampered or swapped row)") from None


def claim(db: Database, job_id: str, worker: str, n: int, lease_s: float) -> Claim | None:
    """Claim up to n pending/expired items. None when the job is missing or final."""
    now = time.time()
    with db.session() as s:
        job = s.get(JobRow, job_id)
        if job is None or job.status in FINAL:
            return None
        info = JobInfo.of(job)
        q = (
            select(JobItemRow.id)
            .where(
                JobItemRow.job_id == job_id,
                or_(
                    JobItemRow.status == "pending",
                    and_(JobItemRow.status == "claimed", JobItemRow.lease_until < now),
                ),
            )
            .order_by(JobItemRow.idx)
            .limit(n)
        )
        if s.get_bind().dialect.name == "postgresql":
            q = q.with_for_update(skip_locked=True)
        ids = list(s.scalars(q))
        if not ids:
            return Claim(info, "", [])
        token = secrets.token_hex(16)
        s.execute(
            update(JobItemRow)
            .where(JobItemRow.id.in_(ids))
            .values(status="claimed", claim_token=token, claimed_by=worker[:256], lease_until=now + lease_s,
                    attempts=JobItemRow.attempts + 1)
        )
        if job.status == "queued":
            s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued")
                      .values(status="running", updated_at=now))
        rows = s.execute(
            select(JobItemRow.id, JobItemRow.idx, JobItemRow.nonce, JobItemRow.ciphertext, JobItemRow.text_sha256)
            .where(JobItemRow.id.in_(ids))
            .order_by(JobItemRow.idx)
        ).all()
    return Claim(info, token, [tuple(r) for r in rows])


def max_attempts_seen(db: Database, claim: Claim) -> int:
    with db.session() as s:
        ids = [it[0] for it in claim.items]
        return int(s.scalar(select(func.max(JobItemRow.attempts)).where(JobItemRow.id.in_(ids))) or 0)


def _merge_handed(old: str | None, handed: dict[int, list[str]]) -> str:
    cur: dict[str, list[str]] = json.loads(old) if old else {}
    for lv, versions in handed.items():
        cur[str(lv)] = sorted(set(cur.get(str(lv), [])) | set(versions))
    return json.dumps(cur, sort_keys=True)


def complete(
    db: Database,
    claim: Claim,
    results: Sequence[dict],
    events: Sequence[AuditEvent],
    handed: dict[int, list[str]],
) -> int:
    """Store results of items still held by this claim, audit them, advance progress; one transaction.

    Returns the number of items written (0 when another worker took them over after our lease expired).
    """
    now = time.time()
    with db.session() as s:
        written_events = []
        for (item_id, *_), res, ev in zip(claim.items, results, events, strict=True):
            r = s.execute(
                update(JobItemRow)
                .where(JobItemRow.id == item_id, JobItemRow.status == "claimed", JobItemRow.claim_token == claim.token)
                .values(status="done", result=json.dumps(res, sort_keys=True), done_at=now, ciphertext=None,
                        nonce=None, claim_token=None, lease_until=None)
            )
            if r.rowcount == 1:
                written_events.append(ev)
        if written_events:
            append(s, written_events)  # fail closed: no audit row, no stored result
        n = len(written_events)
        s.execute(update(JobRow).where(JobRow.id == claim.job.id).values(done=JobRow.done + n, updated_at=now))
        job = s.get(JobRow, claim.job.id, populate_existing=True)
        assert job is not None
        job.keys_handed = _merge_handed(job.keys_handed, handed)
        if job.done >= job.total and job.status not in FINAL:
            job.status = "done"
    return n


def fail(db: Database, job_id: str, error: str) -> None:
    with db.session() as s:
        s.execute(
            update(JobRow)
            .where(JobRow.id == job_id, JobRow.status.not_in(FINAL))
            .values(status="failed", error=error[:500], updated_at=time.time())
        )


def wait_hint(db: Database, job_id: str) -> float | None:
    """Seconds until the earliest live lease of this job expires; None when nothing is left to wait for."""
    with db.session() as s:
        job = s.get(JobRow, job_id)
        if job is None or job.status in FINAL:
            return None
        lease = s.scalar(
            select(func.min(JobItemRow.lease_until)).where(JobItemRow.job_id == job_id, JobItemRow.status == "claimed")
        )
        pending = s.scalar(
            select(func.count()).select_from(JobItemRow)
            .where(JobItemRow.job_id == job_id, JobItemRow.status == "pending")
        )
    if pending:
        return 0.0
    if lease is None:
        return None
    return max(0.0, float(lease) - time.time())


def stale_jobs(db: Database, stale_s: float, limit: int = 100) -> list[str]:
    """Unfinished jobs nobody touched (claimed, completed, enqueued) for stale_s seconds; marks them enqueued."""
    now = time.time()
    cutoff = now - stale_s
    with db.session() as s:
        ids = list(
            s.scalars(
                select(JobRow.id)
                .where(
                    JobRow.status.in_(("queued", "running")),
                    JobRow.updated_at < cutoff,
                    or_(JobRow.enqueued_at.is_(None), JobRow.enqueued_at < cutoff),
                )
                .order_by(JobRow.created_at)
                .limit(limit)
            )
        )
        if ids:
            s.execute(update(JobRow).where(JobRow.id.in_(ids)).values(enqueued_at=now))
    return ids


def mark_enqueued(db: Database, job_id: str) -> None:
    with db.session() as s:
        s.execute(update(JobRow).where(JobRow.id == job_id).values(enqueued_at=time.time()))


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def job_view(db: Database, job_id: str) -> tuple[JobInfo, dict] | None:
    """(job, status document); results (in input order) once the job is done."""
    with db.session() as s:
        job = s.get(JobRow, job_id)
        if job is None:
            return None
        doc: dict = {
            "job_id": job.id,
            "status": job.status,
            "progress": {"total": job.total, "done": job.done},
            "max_level": job.max_level,
            "created_at": _iso(job.created_at),
            "updated_at": _iso(job.updated_at),
            "error": job.error,
            "results": None,
        }
        if job.status == "done":
            rows = s.execute(
                select(JobItemRow.result).where(JobItemRow.job_id == job_id).order_by(JobItemRow.idx)
            ).scalars()
            doc["results"] = [json.loads(r) for r in rows]
        return JobInfo.of(job), doc


def keys_handed(db: Database, job_id: str) -> dict[int, list[str]]:
    """What key material a job's decoders were handed: level -> versions (never bytes)."""
    with db.session() as s:
        raw = s.scalar(select(JobRow.keys_handed).where(JobRow.id == job_id))
    return {int(k): v for k, v in (json.loads(raw) if raw else {}).items()}
