"""Jobs without a broker (in-process drains, same code path as workers) and the claim/complete protocol."""

from __future__ import annotations

import json
import logging
import time

import pytest
from sqlalchemy import func, select

from tests.helpers.workers import job_doc, make_texts
from verifier.audit.models import AuditEventRow
from verifier.audit.service import AuditEvent, verify_chain
from verifier.jobs import service as jobs
from verifier.jobs.models import JobItemRow


def test_inprocess_job_matches_verify_and_is_owner_only(db_url, make_service):
    svc = make_service(db_url)
    svc.init_keys()
    texts = make_texts(svc, 6, steps=40)
    jid = svc.submit(texts, "moderator", "mod-a")
    doc = svc.wait_done(jid, role="moderator", sub="mod-a")
    assert doc["progress"] == {"total": 6, "done": 6}
    assert doc["results"] == svc.verify_inline(texts, "moderator")
    assert all([lv["level"] for lv in r["levels"]] == [1] for r in doc["results"])
    assert jobs.keys_handed(svc.ctx.db, jid) == {1: ["l1-v1"]}  # never level 2 for a moderator

    # Owner or admin only; others get 404 (no existence oracle).
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("moderator", "mod-b")).status_code == 404
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("auditor", "aud-1")).status_code == 404
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("admin", "root")).status_code == 200
    assert svc.client.get("/v1/jobs/not-a-uuid", headers=svc.auth("admin")).status_code == 404
    assert svc.client.get(f"/v1/jobs/{jid}").status_code == 401
    assert svc.client.get("/readyz").json() == {"status": "ready", "profile": "default"}

    # Audited like /v1/verify (one event per text, job noted in detail); chain intact.
    with svc.ctx.db.session() as s:
        evs = list(s.scalars(select(AuditEventRow).where(AuditEventRow.detail.like(f"job={jid}%"))))
    assert len(evs) == 6 and {e.subject for e in evs} == {"mod-a"} and {e.levels for e in evs} == {"1"}
    assert verify_chain(svc.ctx.db).valid

    # Input checks as /v1/verify; a moderator cannot ask for level 2.
    r = svc.client.post("/v1/jobs", headers=svc.auth("moderator"), json={"texts": ["a"], "max_level": 2})
    assert r.status_code == 403
    assert svc.client.post("/v1/jobs", headers=svc.auth("moderator"), json={"texts": [" "]}).status_code == 422


def test_large_job_body_is_accepted(sqlite_url, make_service):
    svc = make_service(sqlite_url, max_body_bytes=4096, job_max_body_bytes=2_000_000)
    svc.init_keys()
    texts = make_texts(svc, 2, steps=40) * 40  # > 4 KiB: too big for /v1/verify, fine as a job
    assert len(json.dumps({"texts": texts})) > 4096
    assert svc.client.post("/v1/verify", headers=svc.auth("admin"), json={"texts": texts[:32]}).status_code == 413
    jid = svc.submit(texts, "admin")
    doc = svc.wait_done(jid)
    assert doc["progress"]["done"] == 80 and len(doc["results"]) == 80


def _fake(claim):
    res = [{"idx": idx} for _, idx, *_ in claim.items]
    job = claim.job.id
    evs = [AuditEvent("verify", "s", "admin", "j", [1], None, sha, "ok", f"job={job}") for *_, sha in claim.items]
    return res, evs


def test_claims_are_idempotent_and_leases_expire(db_url, make_service):
    svc = make_service(db_url)
    db, kek = svc.ctx.db, svc.ctx.store.kek
    jid = jobs.create_job(db, kek, owner_sub="s", role="admin", jti="j", profile="default", max_level=2,
                          alpha=1e-4, texts=["one", "two", "three"])
    with db.session() as s:  # texts are not stored in clear
        cts = list(s.scalars(select(JobItemRow.ciphertext).where(JobItemRow.job_id == jid)))
    assert all(b"one" not in c and b"two" not in c for c in cts)

    c1 = jobs.claim(db, jid, "w1", 2, lease_s=-1)  # lease already expired: w1 "died"
    assert [it[1] for it in c1.items] == [0, 1] and jobs.open_texts(kek, c1) == ["one", "two"]
    c2 = jobs.claim(db, jid, "w2", 5, lease_s=60)  # takes the expired items and the pending one
    assert sorted(it[1] for it in c2.items) == [0, 1, 2]
    assert jobs.complete(db, c1, *_fake(c1), {1: ["l1-v1"]}) == 0  # stale claim token: nothing written
    assert jobs.complete(db, c2, *_fake(c2), {1: ["l1-v1"]}) == 3
    assert jobs.complete(db, c2, *_fake(c2), {1: ["l1-v1"]}) == 0  # re-delivery: never overwritten
    assert jobs.claim(db, jid, "w3", 5, 60) is None  # job done: no work
    doc = job_doc(db, jid)
    assert doc["status"] == "done" and doc["results"] == [{"idx": 0}, {"idx": 1}, {"idx": 2}]
    with db.session() as s:
        attempts = dict(s.execute(select(JobItemRow.idx, JobItemRow.attempts).where(JobItemRow.job_id == jid)).all())
        n_audit = s.scalar(select(func.count()).select_from(AuditEventRow))
        cts = list(s.scalars(select(JobItemRow.ciphertext).where(JobItemRow.job_id == jid)))
    assert attempts == {0: 2, 1: 2, 2: 1} and n_audit == 3 and cts == [None, None, None]


def _items(db, jid):
    with db.session() as s:
        items = s.execute(select(JobItemRow.idx, JobItemRow.status, JobItemRow.attempts, JobItemRow.claimed_by)
                          .where(JobItemRow.job_id == jid)).all()
        audited = list(s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} %"))))
    return items, audited


def test_unfinished_inprocess_job_is_resumed_when_the_api_starts(sqlite_url, make_service, caplog):
    """A job accepted by a process that died (items pending, one batch claimed under a live lease) is
    finished by the next API process on the same database, each item stored and audited once."""
    first = make_service(sqlite_url)
    first.init_keys()
    texts = make_texts(first, 6, steps=40)
    db, kek = first.ctx.db, first.ctx.store.kek
    jid = jobs.create_job(db, kek, owner_sub="admin-1", role="admin", jti="j", profile="default", max_level=2,
                          alpha=first.settings.alpha, texts=texts)
    dead = jobs.claim(db, jid, "api-inprocess:dead:1", 2, lease_s=1.0)  # the dead process's batch
    assert len(dead.items) == 2 and job_doc(db, jid)["status"] == "running"

    caplog.set_level(logging.INFO, logger="hero.jobs")
    second = make_service(sqlite_url)  # starting up resumes the job (its own leases outlive a loaded machine)
    doc = second.wait_done(jid)
    assert doc["results"] == second.verify_inline(texts, "admin")
    assert jobs.complete(db, dead, [{}] * 2, [AuditEvent("verify", "x", "admin", "j")] * 2, {}) == 0  # too late
    items, audited = _items(db, jid)
    assert all(st == "done" for _, st, _, _ in items) and sorted(audited) == sorted(set(audited))
    assert len(audited) == 6 and {a for i, _, a, _ in items if i < 2} == {2}
    assert all(by.startswith("api-inprocess:") and by != "api-inprocess:dead:1" for *_, by in items)
    stored = [r for r in caplog.records if r.getMessage() == "job batch stored"]
    assert stored and all(r.job_id == jid and r.items > 0 and r.worker.startswith("api-inprocess:") for r in stored)


@pytest.mark.slow
def test_api_killed_mid_job_completes_exactly_once_after_restart(sqlite_url, make_service, start_api):
    """`hero serve` (in-process jobs) SIGKILLed mid-job; a restarted server finishes the job, and every
    item is stored and audited exactly once."""
    import httpx

    svc = make_service(sqlite_url)  # same database: keys, texts, and the reference results
    svc.init_keys()
    texts = make_texts(svc, 48, steps=40)
    api = start_api(sqlite_url, HERO_WORKER_TEST_DELAY_S="1.5")
    r = httpx.post(f"{api.url}/v1/jobs", json={"texts": texts}, headers=svc.auth("admin", "admin-1"), timeout=30)
    assert r.status_code == 202, r.text
    jid = r.json()["job_id"]
    deadline = time.time() + 600  # polled: a bound for a loaded machine, not a speed target
    while svc.job(jid)["progress"]["done"] < 16:  # first batch of 16 stored, the second being decoded
        assert time.time() < deadline, "the API process made no progress"
        time.sleep(0.05)
    api.kill()
    items, _ = _items(svc.ctx.db, jid)
    assert any(st == "claimed" for _, st, _, _ in items)
    assert svc.job(jid)["status"] == "running" and svc.job(jid)["progress"]["done"] < 48

    start_api(sqlite_url)
    doc = svc.wait_done(jid)
    assert doc["progress"] == {"total": 48, "done": 48}
    assert doc["results"] == svc.verify_inline(texts, "admin")
    items, audited = _items(svc.ctx.db, jid)
    assert all(st == "done" for _, st, _, _ in items)
    assert any(a >= 2 for _, _, a, _ in items)  # the killed process's batch was claimed again
    assert len({by for *_, by in items}) == 2  # both processes stored results
    assert len(audited) == 48 and len(set(audited)) == 48  # each item disclosed and audited exactly once


def test_closing_the_inprocess_dispatcher_stops_the_running_drain_and_waits(sqlite_url, make_service):
    """On shutdown the running drain returns at its next batch boundary and close() waits for it: nothing is
    written after close() returns (a test's schema drop or a migration must not race a drain), and the job
    is left for the next start (its claimed items' lease expires, as after a crash)."""
    svc = make_service(sqlite_url, job_batch_size=2, test_hooks=True, worker_test_delay_s=0.3)
    svc.init_keys()
    texts = make_texts(svc, 12, steps=30)
    r = svc.client.post("/v1/jobs", headers=svc.auth("admin", "admin-1"), json={"texts": texts})
    assert r.status_code == 202, r.text
    jid = r.json()["job_id"]
    db = svc.ctx.db

    def done() -> int:
        return sum(st == "done" for _, st, _, _ in _items(db, jid)[0])

    deadline = time.monotonic() + 600  # polled: a bound for a loaded machine
    while done() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    svc.ctx.jobs.close()  # returns at one batch boundary, not after the whole job (done() < 12 below)
    after = done()
    time.sleep(1.0)  # three more batches' time: a drain still running would store them
    assert done() == after < 12
    assert job_doc(db, jid)["status"] == "running"  # left to the next start
