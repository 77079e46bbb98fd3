"""Findings 4 and 5: a malformed JWKS key never turns valid tokens into 500s or stops start-up; a slow or
failing identity provider never makes a request wait longer than HERO_JWKS_WAIT_SECONDS."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from .test_auth import claims, get_keys

BAD_EC = {"kty": "EC", "crv": "P-256", "kid": "broken", "x": "A" * 43, "y": "A" * 43}  # not on the curve


def _good():
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="idp-1", use="sig")
    return key, jwk


def _token(svc, key, kid="idp-1"):
    return jwt.encode(claims(svc), key, algorithm="ES256", headers={"kid": kid})


def _write(path, keys, bump: int):
    path.write_text(json.dumps({"keys": keys}) if isinstance(keys, list) else keys)
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + bump))


def test_malformed_key_in_file_is_skipped_at_startup_and_at_runtime(make_service, sqlite_url, tmp_path, caplog):
    key, jwk = _good()
    path = tmp_path / "jwks.json"
    _write(path, [BAD_EC, jwk], 0)
    svc = make_service(sqlite_url, dev_mode=False, jwks_file=path)  # used to crash here (InvalidKeyError)
    assert get_keys(svc, _token(svc, key)).status_code == 200
    assert any("broken" in str(getattr(r, "problem", "")) for r in caplog.records)
    _write(path, [jwk, {**BAD_EC, "kid": "broken-2"}], 5)  # changed while running: used to be a 500
    assert get_keys(svc, _token(svc, key)).status_code == 200
    _write(path, "{not json", 10)  # keep the last good set
    assert get_keys(svc, _token(svc, key)).status_code == 200
    _write(path, [BAD_EC], 15)  # nothing usable: keep the last good set
    assert get_keys(svc, _token(svc, key)).status_code == 200
    assert get_keys(svc, _token(svc, key, kid="broken")).status_code == 401


def test_unreadable_jwks_file_does_not_stop_startup(make_service, sqlite_url, tmp_path):
    svc = make_service(sqlite_url, dev_mode=False, jwks_file=tmp_path / "missing.json")
    key, _ = _good()
    assert get_keys(svc, _token(svc, key)).status_code == 401


class IdP:
    """A local JWKS endpoint whose behaviour the test switches: good keys, or hung (until `release` is set, so a
    test never depends on how long a sleep lasts on a loaded machine) then 503."""

    def __init__(self, keys):
        self.keys, self.mode, self.hits, self.release = keys, "good", 0, threading.Event()
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                idp.hits += 1
                if idp.mode == "good":
                    body = json.dumps({"keys": idp.keys}).encode()
                    self.send_response(200)
                else:
                    idp.release.wait(600)
                    body = b"unavailable"
                    self.send_response(503)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def idp():
    key, jwk = _good()
    server = IdP([{**BAD_EC}, jwk])  # a malformed key in the URL's set too
    server.key = key
    yield server
    server.close()


def _timed(svc, token):
    t0 = time.perf_counter()
    code = get_keys(svc, token).status_code
    return code, time.perf_counter() - t0


def _settled(keys) -> None:
    """Until the fetch in flight has finished (polled: a bound for a loaded machine, not a speed target)."""
    deadline = time.monotonic() + 120
    while keys._inflight is not None:
        assert time.monotonic() < deadline, "the JWKS fetch never finished"
        time.sleep(0.01)


def test_failing_idp_before_first_success_backs_off_and_bounds_waits(make_service, sqlite_url, idp, monkeypatch):
    monkeypatch.setattr("verifier.auth.jwt.BACKOFF_BASE_SECONDS", 3600.0)  # the back-off outlasts any slow run
    monkeypatch.setattr("verifier.auth.jwt.FETCH_TIMEOUT_SECONDS", 600.0)  # the fetch hangs until released
    idp.mode = "slow-503"
    svc = make_service(sqlite_url, dev_mode=False, jwks_url=idp.url, jwks_wait_seconds=0.5)
    randoms = [_token(svc, idp.key, kid=uuid.uuid4().hex) for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:  # all answered while the IdP still hangs: each waited its bound, no more
        results = list(pool.map(lambda t: _timed(svc, t), randoms, timeout=120))
    assert not idp.release.is_set() and all(code == 401 for code, _ in results), results
    assert idp.hits <= 1, idp.hits  # was: one fetch after another, each under a lock
    idp.release.set()  # the one hung fetch finishes and fails
    _settled(svc.ctx.tokens.keys)
    for t in randoms:
        assert _timed(svc, t)[0] == 401
        assert svc.ctx.tokens.keys._inflight is None  # backing off: no new fetch, so nothing to wait for
    assert idp.hits == 1, idp.hits


def test_known_key_is_served_while_refresh_fails(make_service, sqlite_url, idp, monkeypatch):
    monkeypatch.setattr("verifier.auth.jwt.FETCH_TIMEOUT_SECONDS", 600.0)  # the refresh hangs until released
    svc = make_service(sqlite_url, dev_mode=False, jwks_url=idp.url, jwks_wait_seconds=30)
    good = _token(svc, idp.key)
    assert _timed(svc, good)[0] == 200
    idp.mode = "slow-503"
    svc.ctx.tokens.keys._url_fetched -= 10_000  # the cache is now stale: a refresh starts
    from verifier.auth.jwt import FETCH_WAITERS_MAX  # more unknown kids than this answer at once, not waiting

    with ThreadPoolExecutor(FETCH_WAITERS_MAX + 1) as pool:
        futures = [pool.submit(_timed, svc, _token(svc, idp.key, kid=uuid.uuid4().hex))
                   for _ in range(FETCH_WAITERS_MAX)]
        code, _ = _timed(svc, good)
        # the last good set at once: answered while the refresh still hangs and the unknown kids still wait
        # their 30 s for it (the valid request used to wait as long as they do)
        assert code == 200 and not idp.release.is_set() and not any(f.done() for f in futures)
        idp.release.set()
        assert [f.result(timeout=120)[0] for f in futures] == [401] * FETCH_WAITERS_MAX
