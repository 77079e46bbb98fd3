"""POST /v1/verify's fast path (verifier.api.fastpath) answers exactly what the FastAPI route answers:
same bytes for results, same status, body and headers for every error, and it hands anything unusual to
the route."""

from __future__ import annotations

import copy
import json
import time

import pytest

from verifier.api.fastpath import VerifyFastPath, parse_verify_body
from verifier.base.metrics import REQUESTS

TEXT = "The council met on Tuesday to discuss the new budget for roads and schools in the district, again."
ROLES = """\
roles:
  moderator: {max_level: 1, actions: [verify]}
  auditor: {max_level: all, actions: [verify, audit.read]}
  admin: {max_level: all, actions: [verify, keys.read, keys.write, audit.read]}
  reader: {max_level: 1, actions: [audit.read]}
  tiny: {max_level: 1, actions: [verify], limits: {texts_per_minute: 2}}
"""


def _fast(svc) -> VerifyFastPath:
    layer = svc.app.middleware_stack
    while not isinstance(layer, VerifyFastPath):
        layer = layer.app
    return layer


@pytest.fixture
def pair(lite, make_service, tmp_path):
    """(fast, route): two apps on one database and one home (same keys, tokens, policy)."""
    roles = tmp_path / "roles.yaml"
    roles.write_text(ROLES)
    fast = make_service(lite.settings.db_url, roles_file=roles)
    route = make_service(lite.settings.db_url, roles_file=roles, verify_fast_path=False)
    fast.client.get("/healthz")  # builds the middleware stack
    return fast, route


def _headers(r) -> dict:
    return {k: v for k, v in r.headers.items() if k != "x-request-id"}


def test_results_are_byte_identical(pair, monkeypatch):
    fast, route = pair
    fast.init_keys()
    real = fast.client.post("/v1/verify", headers=fast.auth("auditor"), json={"texts": [TEXT, TEXT + " More."]})
    assert real.status_code == 200, real.text
    canned = real.json()["results"]
    odd = copy.deepcopy(canned[0])  # what the response model makes of loose input: both paths must agree
    odd["levels"][0]["confidence"] = 0  # int for a float field
    odd["levels"][0]["engine_extra"] = {"x": 1}  # a key the model does not declare
    odd["flags"] = ["mixed-sources"]
    odd["levels"][0]["candidates"] = [{"fields": {"model": 3}, "p_value": 1e-9, "tokens": 40}]
    odd["levels"][0]["spans"] = [{"start": 0, "end": 12, "fields": {"model": 3}}]
    for svc in (fast, route):
        async def fixed(_req, rs=[*canned, odd]):
            return copy.deepcopy(rs)

        monkeypatch.setattr(svc.ctx.batcher, "verify", fixed)
    taken = _fast(fast).taken
    for role, body in (("auditor", {"texts": [TEXT]}), ("moderator", {"texts": [TEXT], "max_level": 1}),
                       ("admin", {"texts": [TEXT, "x y z"], "max_level": None})):
        a = fast.client.post("/v1/verify", headers=fast.auth(role), json=body)
        b = route.client.post("/v1/verify", headers=route.auth(role), json=body)
        assert a.status_code == b.status_code == 200
        assert a.content == b.content
        assert _headers(a) == _headers(b) and a.headers["x-request-id"]
        assert "engine_extra" not in a.text and '"confidence":0.0' in a.text
    assert _fast(fast).taken == taken + 3


def test_real_answers_match_the_route(pair):
    fast, route = pair
    fast.init_keys()
    for role in ("moderator", "auditor"):
        a = fast.client.post("/v1/verify", headers=fast.auth(role), json={"texts": [TEXT]}).json()["results"]
        b = route.client.post("/v1/verify", headers=route.auth(role), json={"texts": [TEXT]}).json()["results"]
        assert [{k: v for k, v in r.items() if k != "receipt"} for r in a] == \
            [{k: v for k, v in r.items() if k != "receipt"} for r in b]
        assert a[0]["receipt"].keys() == b[0]["receipt"].keys()


def _raw(svc, role, body, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {"Authorization": f"Bearer {svc.token(role)}", "Content-Type": "application/json", **headers}
    return svc.client.post("/v1/verify", headers=h, content=data)


CASES = {  # name -> (role, body, extra headers, the fast path handles it itself)
    "no keys yet": ("moderator", {"texts": [TEXT]}, {}, True),
    "level above role": ("moderator", {"texts": [TEXT], "max_level": 2}, {}, True),
    "role without verify": ("reader", {"texts": [TEXT]}, {}, True),
    "role not in policy": ("ghost", {"texts": [TEXT]}, {}, True),
    "empty text": ("moderator", {"texts": ["   "]}, {}, True),
    "too many texts": ("moderator", {"texts": [TEXT] * 33}, {}, True),
    "too long": ("moderator", {"texts": ["a" * 20_001]}, {}, True),
    "lone surrogate": ("moderator", b'{"texts": ["a\\ud800b"]}', {}, True),
    "no texts": ("moderator", {"texts": []}, {}, False),
    "texts missing": ("moderator", {"max_level": 1}, {}, False),
    "extra field": ("moderator", {"texts": [TEXT], "x": 1}, {}, False),
    "text not a string": ("moderator", {"texts": [TEXT, 5]}, {}, False),
    "level zero": ("moderator", {"texts": [TEXT], "max_level": 0}, {}, False),
    "level bool": ("moderator", {"texts": [TEXT], "max_level": True}, {}, False),
    "level float": ("moderator", {"texts": [TEXT], "max_level": 1.0}, {}, False),
    "level string": ("moderator", {"texts": [TEXT], "max_level": "1"}, {}, False),
    "not an object": ("moderator", [TEXT], {}, False),
    "bad json": ("moderator", b'{"texts": [', {}, False),
    "utf-8 bom": ("moderator", b'\xef\xbb\xbf{"texts": ["a b c"]}', {}, False),
    "text/plain": ("moderator", {"texts": [TEXT]}, {"Content-Type": "text/plain"}, False),
    "json with charset": ("moderator", {"texts": [TEXT]}, {"Content-Type": "application/json; charset=utf-8"}, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_errors_and_edge_cases_match_the_route(pair, name):
    fast, route = pair
    role, body, headers, handled = CASES[name]
    if name != "no keys yet":
        fast.init_keys()
    before = _fast(fast).taken
    a, b = _raw(fast, role, body, **headers), _raw(route, role, body, **headers)
    assert a.status_code == b.status_code, name
    if a.status_code != 200:
        assert a.content == b.content and _headers(a) == _headers(b), name
    else:  # charset variant: a real answer from the route (own receipt)
        assert a.json()["results"][0].keys() == b.json()["results"][0].keys()
    assert _fast(fast).taken == before + (1 if handled else 0), name


def test_quota_429_matches_the_route(pair):
    fast, route = pair
    fast.init_keys()
    fast.ctx.limiter.clock = route.ctx.limiter.clock = lambda: 1_800_000_010.0  # one minute window, one Retry-After
    body = {"texts": [TEXT, TEXT]}
    assert _raw(fast, "tiny", body).status_code == 200  # the subject's 2 texts/min, in each app's own counter
    assert _raw(route, "tiny", body).status_code == 200
    a, b = _raw(fast, "tiny", body), _raw(route, "tiny", body)
    assert a.status_code == b.status_code == 429
    assert a.json() == b.json() and a.headers["retry-after"] and "retry-after" in b.headers


def test_access_log_labels_the_route(pair):
    fast, _ = pair
    fast.init_keys()
    ok = REQUESTS.labels("POST", "/v1/verify", "200")
    n = ok._value.get()
    assert _raw(fast, "moderator", {"texts": [TEXT]}).status_code == 200
    deadline = time.monotonic() + 120  # polled (a bound): the access log counts once the app returns, after the read
    while ok._value.get() < n + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ok._value.get() == n + 1


def test_parse_accepts_only_what_the_route_accepts_as_is():
    assert parse_verify_body(b'{"texts": ["a"]}') == (["a"], None)
    assert parse_verify_body(b'{"max_level": 3, "texts": ["a", "b"]}') == (["a", "b"], 3)
    for bad in (b'{"texts": ["a"], "max_level": 65}', b'{"texts": "a"}', b"null", b'{"texts": [null]}',
                b"\xff", b'{"texts": ["a"]} x'):
        assert parse_verify_body(bad) is None
