"""Issue 29 (security round 3): each finding of the attack pass on 620acb1, in process (real uvicorn and
PostgreSQL ones live in test_body_guard.py and test_key_wal_shred.py)."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
from fastapi.testclient import TestClient

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


# -- HIGH-1: non-string items stop at the first one ----------------------------------------------------------------
def test_large_body_of_non_strings_stops_at_its_first_item():
    """The off-loop parser refuses at item 0 instead of building a million ints (then a million error objects)."""
    from fastapi import HTTPException

    from verifier.api.bodies import parse_flat_object, string_array_fields
    from verifier.jobs.schemas import JobIn

    assert string_array_fields(JobIn) == {"texts"}
    from verifier.api.jobs import router as jobs
    from verifier.api.verify import router as verify

    posts = [r for rt in (jobs, verify) for r in rt.routes
             if r.path in ("/v1/jobs", "/v1/verify") and "POST" in r.methods]
    assert len(posts) == 2
    for route in posts:  # what each route's parser enforces
        assert route.string_arrays == {"texts"}, route.path
    body = '{"texts":[' + ",".join(["1"] * 1_000_000) + "]}"
    with pytest.raises(HTTPException) as err:
        parse_flat_object(body, frozenset({"texts"}))
    assert err.value.status_code == 422 and err.value.detail == "texts.0: Input should be a valid string"
    late = '{"texts":["a","b",' + ",".join(["1"] * 10) + "]}"
    with pytest.raises(HTTPException, match=r"texts\.2"):
        parse_flat_object(late, frozenset({"texts"}))
    assert parse_flat_object('{"texts":["a"],"max_level":1}', frozenset({"texts"})) == {"texts": ["a"], "max_level": 1}


@pytest.mark.parametrize("n", [1_000_000, 100_000])  # 2 MB (parsed off the loop) and 200 kB (json.loads)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/verify"])
def test_non_string_items_give_one_error(lite, path, n):
    if path == "/v1/verify" and n > 300_000:
        n = 400_000  # within /v1/verify's 1 MB limit
    body = '{"texts":[' + ",".join(["1"] * n) + "]}"
    r = lite.client.post(path, content=body, headers={**lite.auth("moderator"), "Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"] == "texts.0: Input should be a valid string"  # one error, not one per item


# -- MEDIUM-3: the last 500s ----------------------------------------------------------------------------------------
def test_deeply_nested_json_on_the_fast_path_is_a_400(lite):
    body = '{"texts":["a"],"x":' + "[" * 1000 + "]" * 1000 + "}"
    r = lite.client.post("/v1/verify", content=body,
                         headers={**lite.auth("moderator"), "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["detail"], str)


@pytest.mark.parametrize("query", ["since=9999-12-31T23:59:59-23:59", "until=9999-12-31T23:59:59-23:59",
                                   "since=0001-01-01T00:00:00%2B23:59"])
def test_audit_filter_times_past_the_calendar_are_a_client_error(lite, query):
    r = lite.client.get(f"/v1/audit/events?{query}", headers=lite.auth("auditor"))
    assert r.status_code == 422, r.text
    assert "years 1..9999" in r.json()["detail"]


# -- LOW-1: one Authorization header ----------------------------------------------------------------------------------
def test_more_than_one_authorization_header_is_refused(lite):
    good = lite.token("admin")
    for first, last in ((b"Bearer garbage", good.encode()), (good.encode(), b"Bearer garbage")):
        headers = [(b"authorization", first), (b"authorization", b"Bearer " + last if b" " not in last else last)]
        r = lite.client.get("/v1/keys", headers=headers)
        assert r.status_code == 400 and "Authorization" in r.json()["detail"], r.text
        r = lite.client.post("/v1/verify", headers=[*headers, (b"content-type", b"application/json")],
                             content=json.dumps({"texts": [TEXT]}))
        assert r.status_code == 400, r.text
    assert lite.client.get("/v1/keys", headers=lite.auth("admin")).status_code == 200


# -- LOW-2: receipts bind the released result -------------------------------------------------------------------------
def _changed(result: dict) -> list[dict]:
    """The result with one field changed at a time (top level and inside each level)."""
    out = []
    for key, value in result.items():
        if key == "receipt":
            continue
        r = copy.deepcopy(result)
        if key == "levels":
            for i, level in enumerate(value):
                for lk, lv in level.items():
                    r2 = copy.deepcopy(result)
                    r2["levels"][i][lk] = (lv + 1) if isinstance(lv, int | float) and not isinstance(lv, bool) \
                        else "changed" if not isinstance(lv, dict) else {**lv, "user": 9999}
                    out.append(r2)
            continue
        r[key] = (not value) if isinstance(value, bool) else (value + 1) if isinstance(value, int | float) \
            else ["changed"] if isinstance(value, list) else "changed"
        out.append(r)
    return out


def test_receipt_binds_the_result_as_served(lite):
    from verifier.audit.transparency import TransparencyError, verify_receipt

    lite.init_keys()
    vkey = lite.ctx.signer.vkey
    for path in ("fast", "route"):
        lite.ctx.settings.__dict__["verify_fast_path"] = path == "fast"  # the same body either way
        r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": [TEXT]})
        assert r.status_code == 200, r.text
        served = r.json()["results"][0]
        cp = verify_receipt(served["receipt"], vkey, text=TEXT, result=served)
        assert cp.size >= 1
        variants = _changed(served)
        assert len(variants) > 10
        for v in variants:
            with pytest.raises(TransparencyError, match="different result"):
                verify_receipt(v["receipt"], vkey, text=TEXT, result=v)
    forged = copy.deepcopy(served)
    forged["levels"][0]["fields"] = {k: 9999 for k in forged["levels"][0]["fields"] or {"user": 1}}
    with pytest.raises(TransparencyError):
        verify_receipt(forged["receipt"], vkey, text=TEXT, result=forged)


# -- LOW-3: dev tokens only for a loopback Host, never through a proxy ---------------------------------------------
def test_dev_token_checks_the_host_and_trusts_no_proxy(lite):
    local = TestClient(lite.app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 40000))
    assert local.post("/console/dev-token?role=admin").status_code == 200
    for host in ("localhost:8000", "[::1]:8000", "127.0.0.1"):
        assert local.post("/console/dev-token?role=admin", headers={"Host": host}).status_code == 200, host
    for host in ("rebind.attacker.example:8000", "127.0.0.1.nip.io", "evil.example"):
        assert local.post("/console/dev-token?role=admin", headers={"Host": host}).status_code == 403, host
    for header in ({"X-Forwarded-For": "203.0.113.7"}, {"Forwarded": "for=203.0.113.7"},
                   {"X-Real-IP": "203.0.113.7"}, {"Origin": "http://rebind.attacker.example:8000"}):
        assert local.post("/console/dev-token?role=admin", headers=header).status_code == 403, header
    assert local.post("/console/dev-token?role=admin", headers={"Origin": "http://localhost:8000"}).status_code == 200


# -- LOW-4: unknown kids during a JWKS fetch do not park the thread pool -----------------------------------------------
def test_unknown_kid_flood_waits_for_a_fetch_only_a_few_at_a_time(tmp_path):
    from verifier.auth import jwt
    from verifier.auth.jwt import KeySource

    waiters = getattr(jwt, "FETCH_WAITERS_MAX", 4)
    from verifier.settings import Settings

    release = threading.Event()

    def slow_fetch(url):  # a JWKS endpoint that hangs
        release.wait(10)
        return {"keys": []}

    s = Settings(home=tmp_path, jwks_url="https://idp.example/jwks", jwks_file=None, dev_mode=False,
                 jwks_wait_seconds=3.0)
    keys = KeySource(s, fetch=slow_fetch)
    times: list[float] = []
    lock = threading.Lock()

    def lookup(i):
        t0 = time.perf_counter()
        assert keys.get(f"made-up-{i}") is None
        with lock:
            times.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=lookup, args=(i,)) for i in range(40)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(1.0)
    quick = sum(1 for x in times if x < 1.0)
    release.set()
    for t in threads:
        t.join()
    assert quick >= 40 - waiters, (quick, sorted(times))
    assert time.perf_counter() - t0 < 5


# -- LOW-5: a role that cannot submit jobs does not get the 64 MB job body limit --------------------------------
def test_job_body_limit_is_for_roles_that_verify(lite):
    big = b'{"texts":["' + TEXT.encode() + b'"]' + b" " * 2_000_000 + b"}"  # over HERO_MAX_BODY_BYTES, under /v1/jobs'
    headers = {"Content-Type": "application/json"}
    r = lite.client.post("/v1/jobs", content=big, headers={**lite.auth("provider", "fleet-1"), **headers})
    assert r.status_code == 413, r.text  # refused before the body is read (it was parsed, then 403)
    r = lite.client.post("/v1/jobs", content=big, headers={**lite.auth("moderator"), **headers})
    assert r.status_code == 202, r.text


# -- LOW-7: OpenAPI declares what the middleware answers -----------------------------------------------------------
def test_openapi_declares_guard_errors_and_metrics_text(lite):
    spec = lite.client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            codes = op["responses"]
            assert "400" in codes, (method, path)
            if path.startswith("/v1/"):
                assert "401" in codes, (method, path)
            if "requestBody" in op:
                assert "413" in codes, (method, path)
    metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
