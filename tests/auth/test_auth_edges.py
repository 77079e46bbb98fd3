"""Authentication edges: exactly one Authorization header, dev tokens only for a loopback Host and never
through a proxy, and unknown key ids during a JWKS fetch not parking the thread pool."""

from __future__ import annotations

import json
import threading
import time

from fastapi.testclient import TestClient

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


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


def test_unknown_kid_flood_waits_for_a_fetch_only_a_few_at_a_time(tmp_path):
    from verifier.auth import jwt
    from verifier.auth.jwt import KeySource

    waiters = getattr(jwt, "FETCH_WAITERS_MAX", 4)
    from verifier.base.settings import Settings

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
