"""Bad input -> 4xx with a JSON message; limits -> 413; ops endpoints."""

from __future__ import annotations

import time

import pytest


@pytest.fixture
def svc1(make_service, sqlite_url):
    s = make_service(sqlite_url, max_body_bytes=4096, max_texts=3, max_text_chars=500)
    s.init_keys()
    return s


def post(svc, content=None, json=None, headers=None):
    h = {**svc.auth("auditor"), **(headers or {})}
    return svc.client.post("/v1/verify", content=content, json=json, headers=h)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 422),
        (b"{", 422),
        (b"not json at all", 422),
        (b"[]", 422),
        (b"null", 422),
        (b"{}", 422),
        (b'{"texts": []}', 422),
        (b'{"texts": [""]}', 422),
        (b'{"texts": ["   "]}', 422),
        (b'{"texts": "a string"}', 422),
        (b'{"texts": [1, 2]}', 422),
        (b'{"texts": [null]}', 422),
        (b'{"texts": [["nested"]]}', 422),
        (b'{"texts": ["ok text"], "extra": 1}', 422),
        (b'{"texts": ["ok text"], "max_level": 0}', 422),
        (b'{"texts": ["ok text"], "max_level": "two"}', 422),
        (b'{"texts": ["\\ud800 lone surrogate"]}', 422),
        (b'{"texts": ["\xff\xfe not utf-8"]}', 400),
        (b"\xff\xfe\xfd", 400),
    ],
)
def test_bad_bodies(svc1, body, status):
    r = post(svc1, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, (body, r.text)
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]


def test_wrong_content_type(svc1):
    r = post(svc1, content=b"texts=hello", headers={"content-type": "application/x-www-form-urlencoded"})
    assert 400 <= r.status_code < 500 and isinstance(r.json()["detail"], str)


def test_limits(svc1):
    # The body limit's answer names the text limits too; a text limit's answer names only itself.
    every = "at most 3 texts per request and 500 characters per text"
    r = post(svc1, json={"texts": ["x" * 5000]})
    assert r.status_code == 413 and r.json()["detail"] == f"request body too large (limit 4096 bytes; {every})"
    r = post(svc1, json={"texts": ["a b c"] * 4})
    assert r.status_code == 413 and r.json()["detail"] == "too many texts: 4 (at most 3 texts per request)"
    r = post(svc1, json={"texts": ["y " * 300]})
    # texts are numbered from 1, and only the limit hit is named
    assert r.status_code == 413
    assert r.json()["detail"] == "text 1 is too long: 600 characters (at most 500 characters per text)"
    jobs = svc1.client.post("/v1/jobs", headers=svc1.auth("auditor"), json={"texts": ["y " * 300]})
    assert jobs.status_code == 413 and jobs.json()["detail"] == (
        "text 1 is too long: 600 characters (at most 500 characters per text)")

    def chunks():  # no Content-Length: counted while streaming
        yield b'{"texts": ["'
        for _ in range(10):
            yield b"z" * 1000
        yield b'"]}'

    r = post(svc1, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_ok_request_shape(svc1):
    r = post(svc1, json={"texts": ["An ordinary sentence, not watermarked at all."]})
    assert r.status_code == 200
    (res,) = r.json()["results"]
    assert set(res) == {
        "watermarked", "p_value", "key_version", "tokens_scored", "flags", "spec_version", "scoring", "levels",
        "profile", "receipt"}
    assert res["watermarked"] is False
    assert {"level", "fields", "confidence"} <= set(res["levels"][0])


def test_profile_is_read_once_not_per_request(svc1, monkeypatch):
    """The loaded profile travels with the request and the in-process job: no YAML is read after start-up."""

    def no_yaml(path):
        raise AssertionError(f"profile file read during a request: {path}")

    monkeypatch.setattr("verifier.engine.profile.load_profile", no_yaml)
    assert post(svc1, json={"texts": ["An ordinary sentence, not watermarked at all."]}).status_code == 200
    r = svc1.client.post("/v1/jobs", headers=svc1.auth("auditor", "a-1"), json={"texts": ["Another plain sentence."]})
    assert r.status_code == 202
    jid = r.json()["job_id"]
    deadline = time.monotonic() + 600  # polled: a bound for a loaded machine, not a speed target
    while True:
        doc = svc1.client.get(f"/v1/jobs/{jid}", headers=svc1.auth("auditor", "a-1")).json()
        if doc["status"] in ("done", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert doc["status"] == "done", doc


def test_domain_errors_share_one_handler(lite):
    """The same service error answers the same status on every route (409: no keys yet)."""
    verify = lite.client.post("/v1/verify", headers=lite.auth("admin"), json={"texts": ["hello there friend"]})
    missing = lite.client.post("/v1/keys/1/versions/l1-v1/disable", headers=lite.auth("admin"))
    assert verify.status_code == 409 and missing.status_code == 404
    lite.init_keys()
    active = lite.client.post("/v1/keys/1/versions/l1-v1/disable", headers=lite.auth("admin"))
    assert active.status_code == 409 and active.json() == {"detail": active.json()["detail"]}


def test_no_keys_yet_is_409(lite):
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": ["hello there friend"]})
    assert r.status_code == 409 and "hero keys init" in r.json()["detail"]


def test_unknown_route_and_method(lite):
    assert lite.client.get("/v1/nope").json() == {"detail": "Not Found"}
    r = lite.client.get("/v1/verify")
    assert r.status_code == 405 and isinstance(r.json()["detail"], str)


def test_ops_endpoints(svc, monkeypatch):
    c = svc.client
    assert c.get("/healthz").json() == {"status": "ok"}
    assert c.get("/readyz").json() == {"status": "ready", "profile": "default"}  # the profile served
    c.get("/v1/keys")  # a 401, counted
    m = c.get("/metrics")
    assert m.status_code == 200 and "hero_http_requests_total" in m.text
    assert "hero_auth_failures_total" in m.text
    assert c.get("/docs").status_code == 200
    spec = c.get("/openapi.json").json()
    assert {"/v1/verify", "/v1/keys", "/v1/keys/{level}/rotate", "/v1/audit/verify", "/readyz"} <= set(spec["paths"])

    def down():
        raise OSError("connection refused")

    monkeypatch.setattr(svc.ctx.db, "ping", down)
    r = c.get("/readyz")
    assert r.status_code == 503 and r.json() == {"detail": "database unreachable"}


def test_hero_token_cli(monkeypatch, capsys, hero_home):
    import jwt

    from verifier.cli import main

    monkeypatch.delenv("HERO_DEV_MODE", raising=False)
    assert main(["token", "--role", "admin", "--sub", "bob"]) == 2
    assert "dev mode" in capsys.readouterr().err
    monkeypatch.setenv("HERO_DEV_MODE", "1")
    assert main(["token", "--role", "nobody", "--sub", "bob"]) == 2
    capsys.readouterr()
    assert main(["token", "--role", "moderator", "--sub", "bob", "--ttl", "120"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    claims = jwt.decode(out.strip(), options={"verify_signature": False})
    assert claims["role"] == "moderator" and claims["sub"] == "bob" and claims["exp"] - claims["iat"] == 120
