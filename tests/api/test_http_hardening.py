"""Findings 2 and 15, and exposure settings: bounded metric label sets, the error shape the OpenAPI
document promises, UTF-8-only bodies, configurable /metrics and /docs."""

from __future__ import annotations

import random
import string

import pytest
from prometheus_client import REGISTRY


def _series(name: str) -> int:
    return sum(len(m.samples) for m in REGISTRY.collect() if m.name == name)


def test_random_methods_do_not_create_metric_series(lite):
    lite.client.get("/healthz")
    rng = random.Random(7)
    before = _series("hero_http_requests")
    for _ in range(300):
        method = "".join(rng.choice(string.ascii_uppercase) for _ in range(257))
        lite.client.request(method, "/v1/verify")
        lite.client.request(method, f"/nope/{rng.random()}")
    after = _series("hero_http_requests")
    # One new ('other', route, status) combination at most per (route, status), not one per method.
    assert after - before <= 6, (before, after)
    text = lite.client.get("/metrics").text
    assert 'method="other"' in text and "AAAA" not in text


def test_422_detail_matches_openapi(lite):
    spec = lite.client.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert spec["components"]["schemas"]["Error"]["properties"]["detail"]["type"] == "string"
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, resp in op["responses"].items():
                if int(code) >= 400:
                    ref = resp["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/Error", (path, method, code)
    assert "422" in spec["paths"]["/v1/verify"]["post"]["responses"]
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": "not a list"})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str) and set(r.json()) == {"detail"}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_non_utf8_bodies_are_400(lite, encoding):
    body = '{"texts": ["hello there"]}'.encode(encoding)
    r = lite.client.post("/v1/verify", headers={**lite.auth("auditor"), "content-type": "application/json"},
                         content=body)
    assert r.status_code == 400 and "UTF-8" in r.json()["detail"]


def test_utf8_split_across_chunks_is_accepted(lite):
    lite.init_keys()
    body = '{"texts": ["caf\u00e9 cr\u00e8me br\u00fbl\u00e9e is a dessert"]}'.encode()

    def chunks():
        for i in range(0, len(body), 3):  # multi-byte characters straddle chunk boundaries
            yield body[i : i + 3]

    r = lite.client.post("/v1/verify", headers={**lite.auth("auditor"), "content-type": "application/json"},
                         content=chunks())
    assert r.status_code == 200, r.text


def test_unauthenticated_bodies_are_refused_before_reading(lite):
    r = lite.client.post("/v1/verify", content=b'{"texts": ["x"]}', headers={"content-type": "application/json"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = lite.client.post("/v1/verify", content=b"\xff" * 10, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401  # not 400: nothing of the body is looked at before authentication


def test_large_flat_body_is_parsed_and_validated(make_service, sqlite_url):
    s = make_service(sqlite_url, max_body_bytes=4_000_000, max_texts=50_000)
    texts = [f"text number {i} with some words" for i in range(20_000)]
    r = s.client.post("/v1/verify", headers=s.auth("auditor"), json={"texts": texts, "max_level": 0})
    assert r.status_code == 422 and "max_level" in r.json()["detail"]  # parsed element by element, then validated
    r = s.client.post("/v1/verify", headers=s.auth("auditor"), json={"texts": [[t] for t in texts]})
    # a non-string item stops the off-loop parse at the first one, named in the answer
    assert r.status_code == 422 and "texts.0" in r.json()["detail"] and "texts.1" not in r.json()["detail"]
    r = s.client.post("/v1/verify", headers={**s.auth("auditor"), "content-type": "application/json"},
                      content=b'{"texts": ["a"' + b" " * 300_000 + b"]")
    assert r.status_code == 422


def test_metrics_and_docs_exposure(make_service, sqlite_url):
    s = make_service(sqlite_url, metrics_exposure="auth", docs_exposure="off")
    assert s.client.get("/metrics").status_code == 401
    assert s.client.get("/metrics", headers=s.auth("moderator")).status_code == 403
    assert s.client.get("/metrics", headers=s.auth("admin")).status_code == 200
    assert s.client.get("/docs").status_code == 404 and s.client.get("/openapi.json").status_code == 404
    off = make_service(sqlite_url, metrics_exposure="off")
    assert off.client.get("/metrics").status_code == 404
