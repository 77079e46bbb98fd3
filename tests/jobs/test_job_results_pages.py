"""Results of a job page by page (cursor) and as one NDJSON stream, each page audited; POST /v1/jobs retried
with its Idempotency-Key makes one job. The in-process drain on SQLite (the Celery fan-out: tests/workers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from tests.helpers.service import service_factory
from tests.helpers.workers import JobService, make_texts

pytestmark = pytest.mark.slow  # a service, keys and a drained job per test


@pytest.fixture
def make_jobs(hero_home) -> Iterator[Callable[..., JobService]]:
    yield from service_factory(hero_home, JobService)


@pytest.fixture
def done_job(sqlite_url, make_jobs):
    svc = make_jobs(sqlite_url, job_batch_size=8)
    svc.init_keys()
    texts = make_texts(svc, 23, steps=40)
    jid = svc.submit(texts, "admin")
    doc = svc.wait_done(jid, timeout=300)
    return svc, jid, doc["results"]


def _reads(svc, jid: str) -> list[str]:
    evs = svc.client.get("/v1/audit/events?limit=1000", headers=svc.auth("admin", "root")).json()["events"]
    return [e["detail"] for e in evs if e["action"] == "jobs.read" and jid in (e.get("detail") or "")]


def test_pages_cover_every_item_once_in_order(done_job):
    svc, jid, whole = done_job
    seen, cursor, pages = [], None, 0
    while True:
        q = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        r = svc.client.get(f"/v1/jobs/{jid}/results", params=q, headers=svc.auth("admin"))
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["total"] == 23 and len(page["results"]) <= 5
        assert page["receipt"] is not None and page["receipt"]["event"]["action"] == "jobs.read"
        seen += page["results"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 5
    assert [r["index"] for r in seen] == list(range(23))
    assert [{k: v for k, v in r.items() if k != "index"} for r in seen] == whole  # what the whole read released
    details = _reads(svc, jid)
    assert sum("results 0..4 of 23" in d for d in details) == 1
    assert sum("results 20..22 of 23" in d for d in details) == 1


def test_ndjson_stream_ends_with_its_count_and_receipt(done_job):
    svc, jid, whole = done_job
    headers = {**svc.auth("admin"), "Accept": "application/x-ndjson"}
    r = svc.client.get(f"/v1/jobs/{jid}/results", params={"limit": 4, "cursor": "3"}, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.text.splitlines()]
    body, end = lines[:-1], lines[-1]
    assert end["end"] is True and end["count"] == 20 and end["receipt"]["event"]["action"] == "jobs.read"
    assert [x["index"] for x in body] == list(range(3, 23))
    assert [{k: v for k, v in x.items() if k != "index"} for x in body] == whole[3:]


def test_results_refused_to_others_and_bad_cursors(done_job):
    svc, jid, _ = done_job
    assert svc.client.get(f"/v1/jobs/{jid}/results", headers=svc.auth("moderator", "mallory")).status_code == 404
    assert svc.client.get("/v1/jobs/not-a-uuid/results", headers=svc.auth("admin")).status_code == 404
    for bad in ("24", "9" * 13):  # past the end; longer than any cursor
        r = svc.client.get(f"/v1/jobs/{jid}/results", params={"cursor": bad}, headers=svc.auth("admin"))
        assert r.status_code == 422, (bad, r.text)
    # "²" passed str.isdigit() and then int() raised (a 500); Arabic-Indic digits were read as a
    # cursor. Only ASCII digits are a cursor: anything else is a 400 naming what a cursor is.
    for bad in ("-1", "abc", "\u00b2", "\u0663", "\uff11", " 1", "1\n"):
        r = svc.client.get(f"/v1/jobs/{jid}/results", params={"cursor": bad}, headers=svc.auth("admin"))
        assert r.status_code == 400 and "ASCII digits" in r.json()["detail"], (bad, r.text)
    r = svc.client.get(f"/v1/jobs/{jid}", params={"results": "false"}, headers=svc.auth("admin"))
    assert r.status_code == 200 and r.json()["results"] is None and r.json()["status"] == "done"


def test_results_of_a_job_not_done_are_409(sqlite_url, make_jobs):
    svc = make_jobs(sqlite_url, test_hooks=True, worker_test_delay_s=3.0, job_batch_size=4)
    svc.init_keys()
    jid = svc.submit(make_texts(svc, 8, steps=40), "admin")
    r = svc.client.get(f"/v1/jobs/{jid}/results", headers=svc.auth("admin"))
    assert r.status_code == 409 and "results are read once it is done" in r.json()["detail"]


def test_post_retried_with_its_idempotency_key_makes_one_job(sqlite_url, make_jobs):
    svc = make_jobs(sqlite_url)
    svc.init_keys()
    texts = make_texts(svc, 3, steps=40)
    h = {**svc.auth("admin"), "Idempotency-Key": "7f1c1f3e-retry-1"}
    first = svc.client.post("/v1/jobs", headers=h, json={"texts": texts})
    again = svc.client.post("/v1/jobs", headers=h, json={"texts": texts})
    assert first.status_code == again.status_code == 202
    assert first.json()["job_id"] == again.json()["job_id"] and again.headers["Idempotent-Replayed"] == "true"
    listed = svc.client.get("/v1/jobs", headers=svc.auth("admin")).json()["jobs"]
    assert [j["job_id"] for j in listed] == [first.json()["job_id"]]
    other = svc.client.post("/v1/jobs", headers=h, json={"texts": texts[:2]})
    assert other.status_code == 409
    # the key is the caller's own: another subject with the same key makes its own job
    h2 = {**svc.auth("admin", "admin-2"), "Idempotency-Key": "7f1c1f3e-retry-1"}
    assert svc.client.post("/v1/jobs", headers=h2, json={"texts": texts}).json()["job_id"] != first.json()["job_id"]
    for bad in ("", "x" * 256, "tab\tin"):
        r = svc.client.post("/v1/jobs", headers={**svc.auth("admin"), "Idempotency-Key": bad}, json={"texts": texts})
        assert r.status_code == 422, (bad, r.text)
