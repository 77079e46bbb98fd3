"""One job on several Celery workers: its drain messages (fan-out), both workers taking part, every item stored
and audited once, and a worker's /metrics pending-items gauge falling to 0 as the job drains."""

from __future__ import annotations

import re
import time
from itertools import pairwise

import httpx
import pytest
from sqlalchemy import func, select

from tests.helpers.workers import free_port, make_texts
from verifier.audit.models import AuditEventRow
from verifier.jobs.models import JobItemRow

pytestmark = pytest.mark.slow  # real redis-server and Celery worker subprocesses


def test_a_job_becomes_one_message_per_batch_up_to_the_fanout_setting(pg_url, redis_server, make_service):
    svc = make_service(pg_url, broker_url=redis_server.url, job_batch_size=16, job_fanout_max=3)
    svc.init_keys()
    client = redis_server.client()
    texts = make_texts(svc, 40, steps=40)
    svc.submit(texts[:16], "admin")  # one batch: one message
    assert client.llen("gpu") == 1
    svc.submit(texts[:33], "admin")  # three batches: three messages
    assert client.llen("gpu") == 4
    svc.submit(texts * 2, "admin")  # five batches, capped at three
    assert client.llen("gpu") == 7


def _gauge(url: str, name: str) -> float | None:
    try:
        body = httpx.get(url, timeout=2.0).text
    except httpx.HTTPError:
        return None
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", body, re.M)
    return float(m.group(1)) if m else None


def test_two_workers_drain_one_job_each_item_once_and_the_pending_gauge_falls_to_zero(
    pg_url, redis_server, make_service, start_worker
):
    svc = make_service(pg_url, broker_url=redis_server.url, job_batch_size=16)
    svc.init_keys()
    texts = make_texts(svc, 96, steps=40)
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    start_worker(pg_url, redis_server.url, HERO_WORKER_TEST_DELAY_S="0.4", HERO_WORKER_METRICS_PORT=str(port))
    start_worker(pg_url, redis_server.url, HERO_WORKER_TEST_DELAY_S="0.4")
    deadline = time.time() + 600  # polled: a bound for a loaded machine
    while _gauge(metrics, "hero_worker_db_up") != 1.0:
        assert time.time() < deadline, "worker metrics never came up"
        time.sleep(0.2)
    assert _gauge(metrics, "hero_job_items_pending") == 0.0  # nothing queued yet
    jid = svc.submit(texts, "admin")  # six batches: six messages, both workers take some
    seen = []
    while True:
        assert time.time() < deadline, f"job not done: {svc.job(jid)['progress']}"
        value = _gauge(metrics, "hero_job_items_pending")
        if value is not None:
            seen.append(value)
        if svc.job(jid)["status"] == "done":
            break
        time.sleep(0.1)
    seen.append(_gauge(metrics, "hero_job_items_pending"))
    assert max(seen) > 0 and seen[-1] == 0.0
    assert all(a >= b for a, b in pairwise(seen)), seen  # it only falls while the job drains
    assert _gauge(metrics, "hero_job_oldest_pending_age_seconds") == 0.0
    decoded = _gauge(metrics, 'hero_job_texts_total{outcome="decoded"}')  # this worker's own count (its children's)
    assert decoded is not None and 0 < decoded < 96
    assert _gauge(metrics, 'hero_verify_texts_total{outcome="watermarked"}') is None  # never a verdict count

    doc = svc.wait_done(jid)
    assert doc["results"] == svc.verify_inline(texts, "admin")
    with svc.ctx.db.session() as s:
        items = s.execute(select(JobItemRow.status, JobItemRow.claimed_by).where(JobItemRow.job_id == jid)).all()
        audited = list(s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid}%"))))
        n_rows = s.scalar(select(func.count()).select_from(JobItemRow).where(JobItemRow.job_id == jid))
    assert n_rows == 96 and all(st == "done" for st, _ in items)
    assert len({by for _, by in items}) == 2  # both workers stored results
    assert len(audited) == 96 and len(set(audited)) == 96  # each item audited exactly once
