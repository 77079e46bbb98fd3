"""The verified-token memory (verifier.auth.jwt.TokenVerifier): a token is remembered only after every check
passed, only until its exp, and only while the key that verified it is still trusted; failures never are."""

from __future__ import annotations

import json
import os
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.auth.jwt import AuthError, TokenVerifier
from verifier.base.settings import Settings


def _jwks(path, key, kid="idp-1"):
    jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, use="sig", alg="EdDSA")
    path.write_text(json.dumps({"keys": [jwk]}))


def _token(key, kid="idp-1", ttl=600, **over) -> str:
    now = int(time.time())
    c = {"iss": "hero-dev", "aud": "hero-verifier", "sub": "alice", "role": "moderator", "iat": now,
         "exp": now + ttl, "jti": uuid.uuid4().hex, **over}
    return jwt.encode(c, key, algorithm="EdDSA", headers={"kid": kid})


@pytest.fixture
def idp(tmp_path):
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "jwks.json"
    _jwks(path, key)
    settings = Settings(home=tmp_path / "home", jwks_file=path, jwt_leeway_seconds=0)
    return key, path, settings


def _count_decodes(monkeypatch) -> list[str]:
    """The tokens whose signature was checked, one entry per check (the unverified peek at `iss` that picks the
    issuer's keys is no signature check and is not counted)."""
    calls: list[str] = []
    real = jwt.decode

    def counting(token, *a, **kw):
        if (kw.get("options") or {}).get("verify_signature", True):
            calls.append(token)
        return real(token, *a, **kw)

    monkeypatch.setattr("verifier.auth.jwt.jwt.decode", counting)
    return calls


def test_a_verified_token_is_remembered_and_not_rechecked(idp, monkeypatch):
    key, _, settings = idp
    calls = _count_decodes(monkeypatch)
    v = TokenVerifier(settings)
    tok = _token(key)
    assert v.cached(tok) is None  # nothing before the full check
    first = v.verify(tok)
    assert v.verify(tok) == first and v.cached(tok) == first
    assert calls == [tok]  # one signature check for three uses
    assert "alice" not in repr(v) and tok not in repr(v)


def test_bad_signatures_are_never_remembered_or_accepted(idp, monkeypatch):
    key, _, settings = idp
    calls = _count_decodes(monkeypatch)
    v = TokenVerifier(settings)
    good = _token(key)
    v.verify(good)
    h, p, s = good.split(".")
    flipped = f"{h}.{p}.{'A' if s[0] != 'A' else 'B'}{s[1:]}"  # same header and claims, other signature
    forged = _token(Ed25519PrivateKey.generate())  # right kid, wrong key
    for bad in (flipped, forged, flipped, forged):
        with pytest.raises(AuthError):
            v.verify(bad)
        assert v.cached(bad) is None
    assert calls.count(flipped) == 2 and calls.count(forged) == 2  # checked in full every time
    assert len(v._verified) == 1


def test_a_remembered_token_ends_at_its_exp(idp):
    """On the verifier's clock, not the machine's speed: a token minted with a long life is moved past its exp."""
    key, _, settings = idp
    now = [time.time()]
    v = TokenVerifier(settings, clock=lambda: now[0])
    tok = _token(key, ttl=3600)
    exp = v.verify(tok).raw["exp"]
    now[0] = exp - 1
    assert v.cached(tok) is not None
    now[0] = exp  # leeway 0: gone at its exp
    assert v.cached(tok) is None and not v._verified
    expired = _token(key, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)  # PyJWT's own clock
    with pytest.raises(AuthError, match="expired"):
        v.verify(expired)
    assert v.cached(expired) is None


def test_expiry_follows_the_clock_and_the_leeway(idp):
    key, _, settings = idp
    now = [time.time()]
    v = TokenVerifier(settings.model_copy(update={"jwt_leeway_seconds": 30}), clock=lambda: now[0])
    tok = _token(key, ttl=100)
    exp = v.verify(tok).raw["exp"]
    now[0] = exp + 29  # within the leeway, as PyJWT would still accept it
    assert v.cached(tok) is not None
    now[0] = exp + 30
    assert v.cached(tok) is None and not v._verified


def test_a_key_removed_from_the_jwks_ends_its_tokens_at_once(idp):
    key, path, settings = idp
    v = TokenVerifier(settings)
    tok = _token(key)
    v.verify(tok)
    other = Ed25519PrivateKey.generate()
    _jwks(path, other, kid="idp-2")
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + 5))  # a distinct mtime even on a coarse clock
    assert v.cached(tok) is None
    with pytest.raises(AuthError, match="unknown key id"):
        v.verify(tok)
    v.verify(_token(other, kid="idp-2"))  # the new key's tokens are fine


def test_the_memory_is_bounded(idp):
    key, _, settings = idp
    v = TokenVerifier(settings, cache_max=3)
    toks = [_token(key) for _ in range(5)]
    for t in toks:
        v.verify(t)
    assert len(v._verified) == 3
    assert v.cached(toks[-1]) is not None and v.cached(toks[0]) is None  # the oldest went first
    assert v.verify(toks[0]).sub == "alice"  # forgotten is not refused: checked in full again
    assert TokenVerifier(settings, cache_max=0).verify(toks[1]).sub == "alice"


def test_http_a_tampered_copy_of_a_remembered_token_is_401(lite):
    lite.init_keys()
    tok = lite.token("moderator")
    body = {"texts": ["An ordinary sentence, long enough to be scored by the detector here."]}
    ok = lite.client.post("/v1/verify", headers={"Authorization": f"Bearer {tok}"}, json=body)
    assert ok.status_code == 200, ok.text
    assert lite.ctx.tokens.cached(tok) is not None
    h, p, s = tok.split(".")
    bad = f"{h}.{p}.{'A' if s[0] != 'A' else 'B'}{s[1:]}"
    for path in ("/v1/verify", "/v1/keys"):  # body guard and dependency paths
        r = lite.client.post(path, headers={"Authorization": f"Bearer {bad}"}, json=body) if path == "/v1/verify" \
            else lite.client.get(path, headers={"Authorization": f"Bearer {bad}"})
        assert r.status_code == 401, (path, r.text)
    assert lite.ctx.tokens.cached(bad) is None
