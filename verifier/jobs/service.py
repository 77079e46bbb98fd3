"""Durable decode jobs: creation (texts sealed at rest), claiming with leases, idempotent completion.

Texts are sealed with AES-256-GCM under a per-job data key wrapped by the KEK provider (the envelope
helper of `verifier.keys.crypto`); each item's associated data binds (job id, index), so ciphertexts
cannot be swapped between items or jobs. Brokers only ever see job ids.

Each claim has a random token; completion writes an item only if it is still claimed with that token,
and never touches an item that is done, so a re-delivered message or a worker whose lease expired
cannot overwrite a result. Results, the progress counter and the audit events commit in one
transaction.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.audit import merkle
from verifier.audit.service import AuditEvent, AuditUnavailable, append, append_or_fail, text_digest
from verifier.auth.principal import Principal
from verifier.base.db import Database
from verifier.base.errors import Conflict, InvalidInput
from verifier.base.metrics import JOB_TEXTS, JOBS
from verifier.jobs import repository as repo
from verifier.jobs.models import JobRow
from verifier.jobs.repository import FINAL, ItemRef
from verifier.keys.crypto import decrypt, encrypt, new_data_key, open_data_key
from verifier.keys.kek import KekProvider

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


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
    owner_iss: str = ""  # the submitting token's issuer: a drain's audit events name the same actor as the POST

    @classmethod
    def of(cls, r: JobRow) -> JobInfo:
        return cls(r.id, r.owner_sub, r.role, r.jti, r.max_level, r.profile, r.alpha, r.status, r.kek_id, r.wrapped_dek,
                   r.owner_iss)


@dataclass(repr=False)
class Claim:
    job: JobInfo
    token: str
    items: list[ItemRef]
    attempts: int = 0  # the most attempts of any of its items, this claim included
    next_idx: int = 0  # where the drain's next pending scan starts

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
    owner_iss: str = "",
    idempotency_key: str | None = None,
    request_sha256: str | None = None,
) -> str:
    """The new job's id. With `idempotency_key`, a second job of the same owner and key cannot be stored (the
    unique constraint raises IntegrityError: see `job_for_key`)."""
    job_id = str(uuid.uuid4())
    key = new_data_key(kek, _job_aad(job_id))
    now = time.time()
    items = []
    for i, t in enumerate(texts):
        nonce, ct = encrypt(key.dek, t.encode("utf-8"), _item_aad(job_id, i))
        items.append({"job_id": job_id, "idx": i, "nonce": nonce, "ciphertext": ct, "text_sha256": text_digest(t),
                      "status": "pending", "attempts": 0})
    with db.session() as s:
        s.add(
            JobRow(
                id=job_id, owner_sub=owner_sub, owner_iss=owner_iss, role=role, jti=jti, max_level=max_level,
                profile=profile, alpha=alpha, status="queued", total=len(texts), done=0, created_at=now, updated_at=now,
                kek_id=key.kek_id, wrapped_dek=key.wrapped, idempotency_key=idempotency_key,
                request_sha256=request_sha256,
            )
        )
        s.flush()
        repo.insert_items(s, items)
    return job_id


def request_digest(texts: Sequence[str], max_level: int | None) -> str:
    """What an `Idempotency-Key` is bound to: the texts and the level asked for (a retry sends the same)."""
    return hashlib.sha256(json.dumps([list(texts), max_level], ensure_ascii=False).encode("utf-8")).hexdigest()


def job_for_key(db: Database, owner: tuple[str, str, str], key: str) -> tuple[str, str | None] | None:
    """(job id, request digest) of the job `owner` = (issuer, subject, role) made with `key`, or None."""
    with db.session() as s:
        return repo.job_for_key(s, owner, key)


def job_key(kek: KekProvider, job: JobInfo) -> bytes:
    """The job's data key, unwrapped (a drain holds it for the job, as it holds the key material)."""
    return open_data_key(kek, job.kek_id, job.wrapped_dek, _job_aad(job.id)).dek


def open_texts(kek: KekProvider, claim: Claim, dek: bytes | None = None) -> list[str]:
    """The claim's texts; `dek`: the job's data key when the caller already unwrapped it (`job_key`)."""
    job = claim.job
    dek = dek if dek is not None else job_key(kek, job)
    return [decrypt(dek, it.nonce, it.ciphertext, _item_aad(job.id, it.idx), "job text").decode("utf-8")
            for it in claim.items]


def claim(db: Database, job_id: str, worker: str, n: int, lease_s: float, start_idx: int = 0) -> Claim | None:
    """Claim up to n expired/pending items (pending ones from `start_idx` first: `Claim.next_idx` of the previous
    claim of a drain). None when the job is missing or final."""
    now = time.time()
    with db.session() as s:
        job = s.get(JobRow, job_id)
        if job is None or job.status in FINAL:
            return None
        info = JobInfo.of(job)
        ids, nxt = repo.claimable_item_ids(s, job_id, now, n, start_idx)
        if not ids:
            return Claim(info, "", [], next_idx=nxt)
        token = secrets.token_hex(16)
        refs, attempts = repo.claim_items(s, ids, token, worker, now + lease_s)
        if job.status == "queued":
            repo.start_job(s, job_id, now)
        return Claim(info, token, refs, attempts, nxt)


def release(db: Database, claim: Claim) -> None:
    """Give a claim back untried: its items wait, pending, for the next drain (the KEK was unreachable)."""
    if claim.token:
        with db.session() as s:
            repo.release_items(s, claim.token)


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
    rows = [(it.id, json.dumps(res, sort_keys=True)) for it, res in zip(claim.items, results, strict=True)]
    now = time.time()
    with db.session() as s:
        stored = set(repo.store_results(s, claim.token, rows, now))  # one statement per batch, not per item
        written_events = [ev for it, ev in zip(claim.items, events, strict=True) if it.id in stored]
        if written_events:
            append(s, written_events)  # fail closed: no audit row, no stored result
        n = len(written_events)
        repo.add_progress(s, claim.job.id, n, now)
        job = s.get(JobRow, claim.job.id, populate_existing=True)
        assert job is not None
        job.keys_handed = _merge_handed(job.keys_handed, handed)
        finished = job.done >= job.total and job.status not in FINAL
        if finished:
            job.status = "done"
    JOB_TEXTS.labels("decoded").inc(n)  # after the commit: counted once stored and audited
    if finished:
        JOBS.labels("done").inc()
    return n


def fail(db: Database, job_id: str, error: str) -> None:
    with db.session() as s:
        repo.fail_job(s, job_id, error, time.time())
    JOBS.labels("failed").inc()


def wait_hint(db: Database, job_id: str) -> float | None:
    """Seconds until the earliest live lease of this job expires; None when nothing is left to wait for."""
    with db.session() as s:
        job = s.get(JobRow, job_id)
        if job is None or job.status in FINAL:
            return None
        lease = repo.earliest_lease(s, job_id)
        pending = repo.pending_count(s, job_id)
    if pending:
        return 0.0
    if lease is None:
        return None
    return max(0.0, float(lease) - time.time())


def stale_jobs(db: Database, stale_s: float, limit: int = 100) -> list[str]:
    """Unfinished jobs nobody touched (claimed, completed, enqueued) for stale_s seconds; marks them enqueued."""
    now = time.time()
    with db.session() as s:
        ids = repo.stale_job_ids(s, now - stale_s, limit)
        if ids:
            repo.mark_enqueued(s, ids, now)
    return ids


def items_left(db: Database, ids: Sequence[str]) -> dict[str, int]:
    """Items not yet stored (total - done) of each job named."""
    with db.session() as s:
        return repo.items_left(s, ids)


def unfinished_jobs(db: Database, limit: int = 10_000) -> list[str]:
    """Jobs queued or running, oldest first (what a restarted in-process dispatcher resumes)."""
    with db.session() as s:
        return repo.unfinished_job_ids(s, limit)


def mark_enqueued(db: Database, job_id: str) -> None:
    with db.session() as s:
        repo.mark_enqueued(s, [job_id], time.time())


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def status_doc(job: JobRow) -> dict:
    """Where a job stands (`JobState`): the one mapping from a job row to what every view of it shows."""
    return {"job_id": job.id, "status": job.status, "progress": {"total": job.total, "done": job.done},
            "max_level": job.max_level, "created_at": _iso(job.created_at), "updated_at": _iso(job.updated_at),
            "error": job.error}


def read_results(
    db: Database, job_id: str, reader: Principal, start: int, limit: int, signer=None, interval_s: float = 0.0,
    *, receipt: bool = True,
) -> dict | None:
    """One page of a done job's results for `reader`: items start .. start+limit-1 (input order), each with its
    `index`, and `next_cursor` (None after the last). None: unknown job or not the reader's (as `read_job`).
    Every page is audited (`jobs.read`, naming the range) and carries that event's receipt; `receipt=False`
    (the NDJSON stream's later pages) appends the event only. A job not done yet: Conflict (409)."""
    with db.session() as s:
        job = _readable(s, job_id, reader)
        if job is None:
            return None
        if job.status != "done":
            raise Conflict(f"job is {job.status}: results are read once it is done")
        if start > job.total:
            raise InvalidInput("cursor is past the job's last result")
        rows = repo.results_page(s, job_id, start, limit)
        results = [{"index": idx, **json.loads(r)} for idx, r in rows]  # type: ignore[arg-type]
        end = start + len(results)
        audited = _audit_read(s, reader, job, f"job {job_id}: results {start}..{end - 1} of {job.total}",
                              signer if receipt else None, interval_s)
        return {"job_id": job_id, "total": job.total, "results": results,
                "next_cursor": str(end) if end < job.total else None, "receipt": audited}


def keys_handed(db: Database, job_id: str) -> dict[int, list[str]]:
    """What key material a job's decoders were handed: level -> versions (never bytes)."""
    with db.session() as s:
        raw = repo.keys_handed_json(s, job_id)
    return {int(k): v for k, v in (json.loads(raw) if raw else {}).items()}


def owner_key(caller: Principal) -> tuple[str, str, str]:
    """(issuer, subject, role): whose jobs a caller's are, for submitting, replaying, listing and reading alike
    (never the subject alone: two issuers' `sub` may collide)."""
    return caller.iss, caller.sub, caller.role


def may_read(owner, reader: Principal) -> bool:
    """A job belongs to (issuer, subject, role); `jobs.read_all` reads any. Either way the reader's level must
    cover the job's: a moderator token that shares an auditor's `sub` never sees level-2 fields."""
    iss, sub, role, level = owner
    mine = (iss, sub, role) == owner_key(reader)
    return (mine or "jobs.read_all" in reader.actions) and reader.max_level >= level


def _readable(s: Session, job_id: str, reader: Principal) -> JobRow | None:
    """The job if `reader` may read it, else None (an unknown job and someone else's look the same). The owner
    check reads four columns before anything else is loaded, so timing does not tell a foreign job from a
    missing one."""
    owner = repo.owner_of(s, job_id)
    if owner is None or not may_read(owner, reader):
        return None
    return s.get(JobRow, job_id)


def _audit_read(s: Session, reader: Principal, job: JobRow, detail: str, signer, interval_s: float) -> dict | None:
    """The `jobs.read` event of results about to be released, appended in the read's transaction, and its
    transparency-log receipt when there is a `signer`: no audit row or no receipt, no results."""
    rows = append_or_fail(s, [AuditEvent.of(reader.actor, "jobs.read", range(1, job.max_level + 1), detail=detail)])
    if signer is None:
        return None
    try:
        return merkle.receipts(s, signer, rows, interval_s)[0]
    except Exception as exc:  # no receipt, no results
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def list_jobs(db: Database, reader: Principal, limit: int, offset: int = 0) -> list[dict]:
    """Status summaries (no results) of the reader's own jobs, newest first; a role with `jobs.read_all` sees
    every owner's. As for reads, only jobs whose level the reader's covers."""
    owner = None if "jobs.read_all" in reader.actions else owner_key(reader)
    with db.session() as s:
        rows = repo.list_jobs(s, owner, reader.max_level, limit, offset)
        return [{**status_doc(j), "subject": j.owner_sub, "role": j.role} for j in rows]


def read_job(db: Database, job_id: str, reader: Principal, signer=None, interval_s: float = 0.0,
             *, results: bool = True) -> dict | None:
    """The job's status document for `reader`, or None (unknown job and someone else's job look the same).

    One transaction: the owner check reads four columns before anything else is loaded (so timing does not
    tell a foreign job from a missing one); releasing results appends a `jobs.read` audit event and returns
    its transparency-log receipt (no audit row, no results).
    """
    with db.session() as s:
        job = _readable(s, job_id, reader)
        if job is None:
            return None
        released = (
            [json.loads(r) for r in repo.results_in_order(s, job_id)]  # type: ignore[arg-type]
            if results and job.status == "done" else None
        )
        audited = None if released is None else _audit_read(s, reader, job, f"job {job_id}: {len(released)} results",
                                                             signer, interval_s)
        return {**status_doc(job), "results": released, "receipt": audited}
