"""Jobs on real Celery worker processes, a private redis-server and the real PostgreSQL."""

from __future__ import annotations

import base64
import json
import time

import pytest
from sqlalchemy import func, select

from tests.helpers.service import secret_forms
from tests.helpers.workers import make_texts
from verifier.audit.models import AuditEventRow
from verifier.jobs import service as jobs
from verifier.jobs.models import JobItemRow


def _redis_dump(client) -> bytes:
    """Every key and value in the broker's Redis, plus decoded Celery message bodies."""
    out = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key)
        if kind == b"list":
            vals = client.lrange(key, 0, -1)
        elif kind == b"hash":
            vals = [x for kv in client.hgetall(key).items() for x in kv]
        elif kind == b"set":
            vals = list(client.smembers(key))
        elif kind == b"zset":
            vals = client.zrange(key, 0, -1)
        elif kind == b"string":
            vals = [client.get(key)]
        else:
            vals = []
        for v in vals:
            out.append(v)
            try:
                msg = json.loads(v)
                if isinstance(msg, dict) and "body" in msg:
                    out.append(base64.b64decode(msg["body"]))
            except (ValueError, TypeError):
                pass
    return b"\n".join(out)


pytestmark = pytest.mark.slow  # real redis-server and Celery worker subprocesses

def test_broker_messages_carry_only_job_ids(pg_url, redis_server, make_service):
    svc = make_service(pg_url, broker_url=redis_server.url)
    svc.init_keys()
    texts = make_texts(svc, 8, steps=40)
    jid = svc.submit(texts, "admin")
    jmod = svc.submit(texts[:3], "moderator")
    client = redis_server.client()
    queued = client.lrange("gpu", 0, -1)
    assert len(queued) == 2  # nobody consumes: the messages sit in the queue
    bodies = []
    for m in queued:
        msg = json.loads(m)
        assert msg["content-type"] == "application/json"
        args, kwargs, _embed = json.loads(base64.b64decode(msg["body"]))
        assert args == [] and set(kwargs) == {"job_id"}
        bodies.append(kwargs["job_id"])
    assert sorted(bodies) == sorted([jid, jmod])

    dump = _redis_dump(client)
    for t in texts:
        for piece in {t.strip(), t.strip()[:24], t.strip()[-24:]}:
            if len(piece) >= 8:
                assert piece.encode() not in dump
                assert base64.b64encode(piece.encode()) not in dump
    needles = secret_forms(svc)
    assert len(needles) >= 5 * 3
    for n in needles:
        assert n not in dump


def test_200_texts_on_a_worker_match_inline_and_moderator_gets_level1_keys_only(
    pg_url, redis_server, make_service, start_worker
):
    svc = make_service(pg_url, broker_url=redis_server.url)
    svc.init_keys()
    texts = make_texts(svc, 200, steps=40)
    jid = svc.submit(texts, "admin")
    jmod = svc.submit(texts[:20], "moderator", "mod-1")
    start_worker(pg_url, redis_server.url)
    doc = svc.wait_done(jid)
    mod = svc.wait_done(jmod, role="moderator", sub="mod-1")
    assert doc["progress"] == {"total": 200, "done": 200}  # how fast is a benchmark's question, not a test's

    assert doc["results"] == svc.verify_inline(texts, "admin")  # same results as inline decoding
    assert sum(r["watermarked"] for r in doc["results"]) >= 150
    assert mod["results"] == svc.verify_inline(texts[:20], "moderator")
    assert all([lv["level"] for lv in r["levels"]] == [1] for r in mod["results"])

    # What the worker's decoder was handed (recorded by the drain from verifier.verify.runner): levels + versions.
    assert jobs.keys_handed(svc.ctx.db, jmod) == {1: ["l1-v1"]}
    assert jobs.keys_handed(svc.ctx.db, jid) == {1: ["l1-v1"], 2: ["l2-v1"]}
    with svc.ctx.db.session() as s:
        claimed_by = set(s.scalars(select(JobItemRow.claimed_by).where(JobItemRow.job_id == jid)))
        n_audit = s.scalar(select(func.count()).select_from(AuditEventRow).where(AuditEventRow.detail.like("job=%")))
    assert len(claimed_by) == 1 and next(iter(claimed_by)).startswith("worker:")  # decoded by the Celery worker
    assert n_audit == 220


def test_worker_sigkilled_mid_job_is_recovered_without_double_decoding(
    pg_url, redis_server, make_service, start_worker
):
    svc = make_service(pg_url, broker_url=redis_server.url)
    svc.init_keys()
    texts = make_texts(svc, 48, steps=40)
    jid = svc.submit(texts, "admin")
    w1 = start_worker(pg_url, redis_server.url, HERO_WORKER_TEST_DELAY_S="1.5")
    deadline = time.time() + 600  # polled: a bound for a loaded machine, not a speed target
    while svc.job(jid)["progress"]["done"] < 16:  # first batch of 16 stored, second one being decoded
        assert time.time() < deadline, "worker made no progress"
        time.sleep(0.05)
    with svc.ctx.db.session() as s:
        claimed = s.scalar(select(func.count()).select_from(JobItemRow)
                           .where(JobItemRow.job_id == jid, JobItemRow.status == "claimed"))
    w1.kill()
    assert claimed > 0 and svc.job(jid)["status"] == "running" and svc.job(jid)["progress"]["done"] < 48

    start_worker(pg_url, redis_server.url)
    doc = svc.wait_done(jid)
    assert doc["results"] == svc.verify_inline(texts, "admin")
    with svc.ctx.db.session() as s:
        items = s.execute(select(JobItemRow.idx, JobItemRow.status, JobItemRow.attempts, JobItemRow.claimed_by)
                          .where(JobItemRow.job_id == jid)).all()
        audit_items = list(s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid}%"))))
    assert all(st == "done" for _, st, _, _ in items)
    assert any(a >= 2 for _, _, a, _ in items)  # the killed worker's batch was claimed again
    assert len({by for *_, by in items}) == 2  # both workers stored results
    # Each item's result was stored (and disclosed/audited) exactly once.
    assert len(audit_items) == 48 and len(set(audit_items)) == 48


def test_redis_restart_readyz_reports_broker_down_and_jobs_complete(pg_url, redis_server, make_service, start_worker):
    svc = make_service(pg_url, broker_url=redis_server.url)
    svc.init_keys()
    texts = make_texts(svc, 48, steps=40)
    start_worker(pg_url, redis_server.url, HERO_WORKER_TEST_DELAY_S="0.5")
    ids = [svc.submit(texts[i : i + 16], "admin") for i in range(0, 48, 16)]
    assert svc.client.get("/readyz").status_code == 200

    redis_server.stop()  # queued messages are lost with it (no persistence)
    r = svc.client.get("/readyz")
    assert r.status_code == 503 and r.json() == {"detail": "broker unreachable"}
    late = svc.submit(texts[:4], "admin")  # accepted (stored in the DB) while the broker is down
    time.sleep(1.0)
    redis_server.start()
    assert svc.client.get("/readyz").status_code == 200

    for jid, chunk in [*zip(ids, [texts[i : i + 16] for i in range(0, 48, 16)], strict=True), (late, texts[:4])]:
        doc = svc.wait_done(jid)
        assert doc["results"] == svc.verify_inline(chunk, "admin")


def test_a_worker_on_a_sqlalchemy_broker_drains_a_job_without_redis(sqlite_url, tmp_path, make_service, start_worker):
    """Any Celery broker carries the drain messages: a bare GPU machine runs the worker with a SQLite broker
    (scripts/gpu-check); Redis-only transport options are not handed to other transports."""
    broker = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    svc = make_service(sqlite_url, broker_url=broker)
    svc.init_keys()
    assert svc.client.get("/readyz").status_code == 200  # the broker check speaks the transport, not Redis
    texts = make_texts(svc, 24, steps=40)
    jid = svc.submit(texts, "admin")
    start_worker(sqlite_url, broker)
    doc = svc.wait_done(jid)
    assert doc["results"] == svc.verify_inline(texts, "admin")
    with svc.ctx.db.session() as s:
        claimed_by = set(s.scalars(select(JobItemRow.claimed_by).where(JobItemRow.job_id == jid)))
    assert len(claimed_by) == 1 and next(iter(claimed_by)).startswith("worker:")
