"""HeroClient: typed results, retries on 429/503 honouring Retry-After, errors with the service's detail."""

from __future__ import annotations

import httpx
import pytest

from verifier.client import HeroAPIError, HeroClient, VerifyResult

RESULT = {
    "watermarked": True, "p_value": 1e-9, "key_version": "l1-v1", "tokens_scored": 80, "flags": [],
    "spec_version": 2, "receipt": {"leaf_index": 0},
    "levels": [
        {"level": 1, "status": "decoded", "key_version": "l1-v1", "fields": {"model": 37}, "confidence": 0.99,
         "p_value": 1e-9, "reason": None},
        {"level": 2, "status": "decoded", "key_version": "l2-v1", "fields": {"user": 1234}, "confidence": 0.9,
         "p_value": 1e-6, "reason": None},
    ],
}


def _client(handler, **kw):
    sleeps: list[float] = []
    c = HeroClient(client=httpx.Client(base_url="http://hero.test", transport=httpx.MockTransport(handler)),
                   token="tok", sleep=sleeps.append, **kw)
    return c, sleeps


def test_verify_retries_429_and_503_honouring_retry_after():
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        assert req.headers["authorization"] == "Bearer tok"
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "7"}, json={"detail": "quota"})
        if len(calls) == 2:
            return httpx.Response(503, json={"detail": "busy"})  # no Retry-After: exponential backoff
        return httpx.Response(200, json={"results": [RESULT]})

    c, sleeps = _client(handler, backoff_s=0.25)
    [r] = c.verify(["text"], max_level=2)
    assert isinstance(r, VerifyResult) and r.watermarked and r.key_version == "l1-v1"
    assert r.fields() == {"model": 37, "user": 1234} and r.levels[1].key_version == "l2-v1"
    assert sleeps == [7.0, 0.5] and len(calls) == 3
    assert calls[-1].url.path == "/v1/verify"


def test_errors_and_exhausted_retries():
    c, sleeps = _client(lambda req: httpx.Response(403, json={"detail": "action 'verify' not allowed"}))
    with pytest.raises(HeroAPIError) as err:
        c.verify(["x"])
    assert err.value.status == 403 and "not allowed" in err.value.detail and sleeps == []
    c, sleeps = _client(lambda req: httpx.Response(503, headers={"Retry-After": "1"}), max_retries=2)
    with pytest.raises(HeroAPIError) as err:
        c.verify(["x"])
    assert err.value.status == 503 and sleeps == [1.0, 1.0]


def test_jobs_submit_poll_and_iterate():
    polls = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            return httpx.Response(202, json={"job_id": "j1"})
        if req.url.path.endswith("/results"):  # results come page by page once the job is done
            first = "cursor" not in req.url.params
            page = [{**RESULT, "index": 0}] if first else [{**RESULT, "watermarked": False, "index": 1}]
            return httpx.Response(200, json={"job_id": "j1", "total": 2, "results": page,
                                             "next_cursor": "1" if first else None, "receipt": None})
        polls.append(1)
        done = len(polls) >= 3
        return httpx.Response(200, json={
            "job_id": "j1", "status": "done" if done else "running", "progress": {"total": 2, "done": 2 if done else 1},
            "max_level": 2, "created_at": None, "updated_at": None, "error": None,
            "results": [RESULT, {**RESULT, "watermarked": False}] if done else None,
        })

    c, sleeps = _client(handler)
    assert c.submit_job(["a", "b"]) == "j1"
    assert c.job("j1").status == "running" and not c.job("j1").finished
    results = list(c.iter_results("j1", poll_s=0.5))
    assert [r.watermarked for r in results] == [True, False] and sleeps == [0.5] * (len(polls) - 3)


def test_submit_job_sends_an_idempotency_key_and_retries_a_lost_answer_with_the_same_key():
    posts: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        posts.append(req)
        if len(posts) == 1:
            raise httpx.ReadTimeout("answer lost", request=req)  # the service may have made the job
        return httpx.Response(202, json={"job_id": "j1"})

    c, _ = _client(handler)
    assert c.submit_job(["a"]) == "j1"
    keys = {r.headers["idempotency-key"] for r in posts}
    assert len(posts) == 2 and len(keys) == 1 and len(next(iter(keys))) == 36  # one UUID for both attempts
    posts.clear()
    c.submit_job(["a"])
    assert posts[0].headers["idempotency-key"] not in keys  # a new call is a new request


def test_a_post_without_a_key_is_not_sent_again_after_the_request_may_have_arrived():
    calls: list[httpx.Request] = []

    def read_timeout(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        raise httpx.ReadTimeout("answer lost", request=req)

    c, _ = _client(read_timeout)
    with pytest.raises(httpx.ReadTimeout):
        c.verify(["x"])
    assert len(calls) == 1  # sent once: a retry could record the disclosure twice

    def refused(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        if len(calls) < 4:
            raise httpx.ConnectError("refused", request=req)  # never reached the service: safe to send again
        return httpx.Response(200, json={"results": [RESULT]})

    calls.clear()
    c, sleeps = _client(refused)
    assert c.verify(["x"])[0].watermarked and len(calls) == 4 and len(sleeps) == 3
