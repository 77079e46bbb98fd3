"""The drain's batch-level database work: claims that cost the same whatever part of a job is done, one
statement per batch for results, the job key unwrapped once per drain, and the attempts limit."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, select, update

from tests.helpers.workers import job_doc, make_texts
from verifier.audit.models import AuditEventRow
from verifier.audit.service import AuditEvent, verify_chain
from verifier.jobs import service as jobs
from verifier.jobs.drain import DrainContext, drain
from verifier.jobs.models import JobItemRow
from verifier.process import profile_lookup


def _job(svc, n: int) -> str:
    return jobs.create_job(svc.ctx.db, svc.ctx.store.kek, owner_sub="s", role="admin", jti="j", profile="default",
                           max_level=2, alpha=1e-4, texts=[f"text {i}" for i in range(n)])


def _fake(claim):
    res = [{"idx": idx} for _, idx, *_ in claim.items]
    evs = [AuditEvent("verify", "s", "admin", "j", [1], None, sha, "ok", f"job={claim.job.id} item={idx}")
           for _, idx, *_, sha in claim.items]
    return res, evs


def _idx(claim) -> list[int]:
    return [it[1] for it in claim.items]


def test_claims_take_expired_items_then_pending_from_the_cursor_and_leave_none_behind(db_url, make_service):
    svc = make_service(db_url)
    db = svc.ctx.db
    jid = _job(svc, 8)
    c1 = jobs.claim(db, jid, "dead", 2, lease_s=-1)  # lease already expired
    assert _idx(c1) == [0, 1] and c1.next_idx == 2 and c1.attempts == 1
    c2 = jobs.claim(db, jid, "w", 3, 60, start_idx=5)  # expired first, then pending from the cursor
    assert _idx(c2) == [0, 1, 5] and c2.next_idx == 6 and c2.attempts == 2
    c3 = jobs.claim(db, jid, "w", 10, 60, start_idx=c2.next_idx)  # short: also the pending ones before it
    assert _idx(c3) == [2, 3, 4, 6, 7] and c3.attempts == 1
    assert jobs.claim(db, jid, "w", 10, 60, start_idx=c3.next_idx).items == []
    assert jobs.complete(db, c1, *_fake(c1), {}) == 0  # taken over: nothing written
    assert jobs.complete(db, c2, *_fake(c2), {}) + jobs.complete(db, c3, *_fake(c3), {}) == 8
    doc = job_doc(db, jid)
    assert doc["status"] == "done" and doc["results"] == [{"idx": i} for i in range(8)]
    with db.session() as s:
        details = sorted(s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} %"))))
    assert details == sorted(f"job={jid} item={i}" for i in range(8))  # each item audited exactly once
    assert verify_chain(db).valid


def _vm_steps(db):
    """Counts SQLite VM instructions (in units of 10) of the statements run while it is active."""
    steps = [0]

    def tick():
        steps[0] += 1
        return 0

    def on_execute(conn, *_a):
        conn.connection.driver_connection.set_progress_handler(tick, 10)

    event.listen(db.engine, "before_cursor_execute", on_execute)
    return steps, lambda: event.remove(db.engine, "before_cursor_execute", on_execute)


def test_a_claim_costs_the_same_at_the_end_of_a_long_job_as_at_its_start(sqlite_url, make_service):
    """A claim once walked every done item of the job in idx order: O(N) per batch, O(N^2) per job."""
    svc = make_service(sqlite_url)
    db = svc.ctx.db
    jid = _job(svc, 4000)
    steps, stop = _vm_steps(db)
    try:
        first = jobs.claim(db, jid, "w", 50, 60)
        early = steps[0]
        with db.session() as s:  # as if a drain had stored the first 3,900 items
            s.execute(update(JobItemRow).where(JobItemRow.job_id == jid, JobItemRow.idx < 3900)
                      .values(status="done", ciphertext=None, nonce=None))
        steps[0] = 0
        late = jobs.claim(db, jid, "w", 50, 60, start_idx=3900)
        late_steps = steps[0]
    finally:
        stop()
    assert _idx(first) == list(range(50)) and _idx(late) == list(range(3900, 3950))
    assert late_steps < 2 * early + 200, (early, late_steps)


def test_a_batch_of_results_is_one_update_statement(db_url, make_service):
    svc = make_service(db_url)
    db = svc.ctx.db
    jid = _job(svc, 40)
    c = jobs.claim(db, jid, "w", 40, 60)
    seen: list[tuple[str, bool]] = []

    def on_execute(_conn, _cur, statement, _params, _ctx, executemany):
        if statement.lstrip().upper().startswith("UPDATE HERO_JOB_ITEMS"):
            seen.append((statement, executemany))

    event.listen(db.engine, "before_cursor_execute", on_execute)
    try:
        assert jobs.complete(db, c, *_fake(c), {1: ["l1-v1"]}) == 40
    finally:
        event.remove(db.engine, "before_cursor_execute", on_execute)
    assert len(seen) == 1 and seen[0][1]  # one executemany, not 40 statements
    with db.session() as s:
        rows = s.execute(select(JobItemRow.status, JobItemRow.ciphertext, JobItemRow.claim_token)
                         .where(JobItemRow.job_id == jid)).all()
    assert rows and all(r == ("done", None, None) for r in rows)


def _context(svc, batch: int) -> DrainContext:
    ctx = svc.ctx
    return DrainContext(db=ctx.db, store=ctx.store, profiles=profile_lookup(ctx.profile), runner=ctx.runner,
                        policy=ctx.policy, worker="test", batch_size=batch)


def _generated_job(svc, n: int) -> tuple[list[str], str]:
    """n watermarked texts (keys initialised) and the id of an admin job over them."""
    svc.init_keys()
    texts = make_texts(svc, n, steps=40)
    jid = jobs.create_job(svc.ctx.db, svc.ctx.store.kek, owner_sub="admin-1", role="admin", jti="j",
                          profile=svc.ctx.profile.name, max_level=2, alpha=svc.settings.alpha, texts=texts)
    return texts, jid


def test_drain_unwraps_the_job_key_once_and_results_match_verify(sqlite_url, make_service, monkeypatch):
    svc = make_service(sqlite_url)
    texts, jid = _generated_job(svc, 7)
    calls = []
    real = jobs.job_key
    monkeypatch.setattr(jobs, "job_key", lambda kek, job: calls.append(job.id) or real(kek, job))
    assert drain(_context(svc, 2), jid).written == 7  # four batches
    assert calls == [jid]
    doc = svc.job(jid)
    assert doc["status"] == "done" and doc["results"] == svc.verify_inline(texts, "admin")


def test_drain_fails_a_job_whose_items_ran_out_of_attempts(sqlite_url, make_service):
    svc = make_service(sqlite_url)
    db = svc.ctx.db
    jid = _job(svc, 3)
    with db.session() as s:  # item 1 was claimed 5 times already (workers died on it)
        s.execute(update(JobItemRow).where(JobItemRow.job_id == jid, JobItemRow.idx == 1).values(attempts=5))
    dc = _context(svc, 2)
    dc.max_attempts = 5
    assert drain(dc, jid).written == 0  # this claim is its 6th attempt
    doc = job_doc(db, jid)
    assert doc["status"] == "failed" and doc["error"] == "items could not be decoded after 5 attempts"


def test_a_batch_whose_audit_write_fails_is_not_stored_and_the_drain_stops(sqlite_url, make_service, monkeypatch):
    """Fail closed with the background store: no audit row, no stored result, nothing stored after it; the
    items are taken again once their leases expire, each stored and audited exactly once."""
    svc = make_service(sqlite_url)
    texts, jid = _generated_job(svc, 6)
    db = svc.ctx.db

    def broken(*_a, **_k):
        raise RuntimeError("audit log down")

    monkeypatch.setattr(jobs, "append", broken)
    dc = _context(svc, 2)
    dc.lease_s = 0.5
    with pytest.raises(RuntimeError, match="audit log down"):
        drain(dc, jid)
    doc = job_doc(db, jid)
    with db.session() as s:
        statuses = set(s.scalars(select(JobItemRow.status).where(JobItemRow.job_id == jid)))
        audited = [d.split(" result_sha256=")[0]  # item events also bind the released result
                   for d in s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} %")))]
    assert doc["progress"]["done"] == 0 and doc["status"] == "running" and "done" not in statuses and not audited

    monkeypatch.undo()
    time.sleep(0.6)  # the claims of the failed drain expire
    assert drain(_context(svc, 2), jid).written == 6
    doc = svc.job(jid)
    assert doc["status"] == "done" and doc["results"] == svc.verify_inline(texts, "admin")
    with db.session() as s:
        audited = [d.split(" result_sha256=")[0]  # item events also bind the released result
                   for d in s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} %")))]
    assert sorted(audited) == sorted(f"job={jid} item={i}" for i in range(6))
    assert verify_chain(db).valid


def test_the_next_batch_is_tokenized_on_its_own_thread_while_this_one_decodes(sqlite_url, make_service, monkeypatch):
    """Batches are claimed and tokenized ahead (the tokenizer thread) of the one being decoded: by the time a
    batch is stored, the two after it are claimed; results are those of inline decoding."""
    svc = make_service(sqlite_url)
    texts, jid = _generated_job(svc, 10)
    order: list[tuple[str, object]] = []
    real_claim, real_complete = jobs.claim, jobs.complete

    def claim(*a, **k):
        c = real_claim(*a, **k)
        order.append(("claim", _idx(c)[0] if c is not None and c.items else None))
        return c

    def complete(db_, c, *a, **k):
        order.append(("store", _idx(c)[0]))
        return real_complete(db_, c, *a, **k)

    tok = svc.ctx.tokenizers(svc.ctx.profile.tokenizer)
    threads: list[str] = []

    class Recording:
        def encode_ids(self, batch):
            threads.append(threading.current_thread().name)
            return tok.encode_ids(batch)

    monkeypatch.setattr(jobs, "claim", claim)
    monkeypatch.setattr(jobs, "complete", complete)
    dc = _context(svc, 2)
    with monkeypatch.context() as m:  # the process's runner, with a tokenizer that records its threads
        m.setattr(dc.runner.tokenizers, "for_profile", lambda _profile: Recording())
        assert drain(dc, jid).written == 10
    assert len(threads) == 5 and all(t.startswith("hero-job-tokenize") for t in threads)
    stores = [i for i, (kind, _) in enumerate(order) if kind == "store"]
    claimed_before = [sum(1 for kind, first in order[:i] if kind == "claim" and first is not None) for i in stores]
    # batch k (1-based) is stored after batches up to k+2 were claimed (the first one: after k+1, while the
    # drain still times its batches); the last ones: once all five were.
    assert claimed_before[0] >= 2 and all(n >= min(k + 3, 5) for k, n in enumerate(claimed_before) if k)
    doc = svc.job(jid)
    assert doc["status"] == "done" and doc["results"] == svc.verify_inline(texts, "admin")


def test_batches_slow_against_the_lease_are_claimed_one_at_a_time(sqlite_url, make_service):
    """A claim made ahead waits for the batches before it; when batches take a large part of the lease, the
    drain claims only what it decodes next, so none of its claims expires and is taken again (attempts 1)."""
    svc = make_service(sqlite_url)
    db = svc.ctx.db
    jid = _job(svc, 8)
    svc.init_keys()
    dc = _context(svc, 2)
    dc.lease_s, dc.delay_s = 3.0, 1.8  # two batches outlast the lease; 1.2 s left for a decode on a loaded machine
    assert drain(dc, jid).written == 8
    with db.session() as s:
        attempts = list(s.scalars(select(JobItemRow.attempts).where(JobItemRow.job_id == jid)))
        audited = [d.split(" result_sha256=")[0]  # item events also bind the released result
                   for d in s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} %")))]
    assert attempts == [1] * 8 and sorted(audited) == sorted(f"job={jid} item={i}" for i in range(8))
