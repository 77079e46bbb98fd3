"""JWT attack matrix (401) and policy checks (403)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.auth.devkeys import _load_or_create, dev_public_jwk
from verifier.auth.jwt import JwksError, parse_jwks


def b64u(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def claims(svc, **over):
    now = int(time.time())
    c = {
        "iss": svc.settings.jwt_issuer,
        "aud": svc.settings.jwt_audience,
        "sub": "mallory",
        "role": "admin",
        "iat": now,
        "exp": now + 600,
        "jti": uuid.uuid4().hex,
    }
    for k, v in over.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def dev_sign(svc, c, headers=None) -> str:
    key = _load_or_create(svc.settings.dev_key_dir)
    kid = dev_public_jwk(svc.settings.dev_key_dir)["kid"]
    return jwt.encode(c, key, algorithm="EdDSA", headers={"kid": kid, **(headers or {})})


def get_keys(svc, token: str):
    return svc.client.get("/v1/keys", headers={"Authorization": f"Bearer {token}"})


def test_valid_dev_token_is_accepted(lite):
    assert get_keys(lite, dev_sign(lite, claims(lite))).status_code == 200


def _alg_none(svc):
    kid = dev_public_jwk(svc.settings.dev_key_dir)["kid"]
    h = b64u(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    p = b64u(json.dumps(claims(svc)).encode())
    return f"{h}.{p}."


def _hs256_with_public_key(svc):
    jwk = dev_public_jwk(svc.settings.dev_key_dir)
    pub = _load_or_create(svc.settings.dev_key_dir).public_key()
    pem = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    h = b64u(json.dumps({"alg": "HS256", "typ": "JWT", "kid": jwk["kid"]}).encode())
    p = b64u(json.dumps(claims(svc)).encode())
    sig = hmac.new(pem, f"{h}.{p}".encode(), hashlib.sha256).digest()
    return f"{h}.{p}.{b64u(sig)}"


def _tampered(svc):
    tok = svc.token("moderator")
    h, p, s = tok.split(".")
    body = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    body["role"] = "admin"
    return f"{h}.{b64u(json.dumps(body).encode())}.{s}"


def _unknown_kid(svc):
    return jwt.encode(claims(svc), Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "not-a-known-kid"})


def _foreign_key_known_kid(svc):
    kid = dev_public_jwk(svc.settings.dev_key_dir)["kid"]
    return jwt.encode(claims(svc), Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": kid})


now = int(time.time())
ATTACKS = {
    "alg_none": _alg_none,
    "hs256_public_key": _hs256_with_public_key,
    "expired": lambda s: dev_sign(s, claims(s, iat=now - 7200, exp=int(time.time()) - 3600)),
    "expired_beyond_leeway": lambda s: dev_sign(s, claims(s, iat=int(time.time()) - 600, exp=int(time.time()) - 61)),
    "not_yet_valid_nbf": lambda s: dev_sign(s, claims(s, nbf=int(time.time()) + 3600)),
    "issued_in_future": lambda s: dev_sign(s, claims(s, iat=int(time.time()) + 3600, exp=int(time.time()) + 4000)),
    "wrong_aud": lambda s: dev_sign(s, claims(s, aud="someone-else")),
    "wrong_iss": lambda s: dev_sign(s, claims(s, iss="https://evil.example")),
    "missing_exp": lambda s: dev_sign(s, claims(s, exp=None)),
    "missing_jti": lambda s: dev_sign(s, claims(s, jti=None)),
    "missing_iat": lambda s: dev_sign(s, claims(s, iat=None)),
    "missing_sub": lambda s: dev_sign(s, claims(s, sub=None)),
    "missing_aud": lambda s: dev_sign(s, claims(s, aud=None)),
    "missing_iss": lambda s: dev_sign(s, claims(s, iss=None)),
    "missing_role": lambda s: dev_sign(s, claims(s, role=None)),
    "lifetime_too_long": lambda s: dev_sign(s, claims(s, exp=int(time.time()) + 10 * 86400)),
    "unknown_kid": _unknown_kid,
    "no_kid": lambda s: jwt.encode(claims(s), _load_or_create(s.settings.dev_key_dir), algorithm="EdDSA"),
    "wrong_signing_key": _foreign_key_known_kid,
    "tampered_payload": _tampered,
    "garbage": lambda s: "not.a.jwt",
    "empty_segments": lambda s: "..",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_matrix_is_401(lite, attack):
    r = get_keys(lite, ATTACKS[attack](lite))
    assert r.status_code == 401, (attack, r.text)
    assert isinstance(r.json()["detail"], str)
    assert r.headers.get("www-authenticate") == "Bearer"


def test_missing_or_wrong_scheme_is_401(lite):
    assert lite.client.get("/v1/keys").status_code == 401
    tok = lite.token("admin")
    assert lite.client.get("/v1/keys", headers={"Authorization": f"Basic {tok}"}).status_code == 401
    assert lite.client.post("/v1/verify", json={"texts": ["x"]}).status_code == 401


def test_dev_token_rejected_when_dev_mode_off(make_service, sqlite_url, lite):
    tok = lite.token("admin")
    off = make_service(sqlite_url, dev_mode=False)
    assert get_keys(off, tok).status_code == 401


def test_role_not_in_policy_is_403(lite):
    r = get_keys(lite, lite.token("superuser"))
    assert r.status_code == 403
    assert "policy" in r.json()["detail"]


@pytest.mark.parametrize(
    ("role", "method", "path"),
    [
        ("moderator", "get", "/v1/keys"),
        ("moderator", "post", "/v1/keys/1/rotate"),
        ("moderator", "get", "/v1/audit/events"),
        ("moderator", "get", "/v1/audit/verify"),
        ("auditor", "post", "/v1/keys/1/rotate"),
        ("auditor", "post", "/v1/keys/init"),
        ("auditor", "get", "/v1/keys"),
    ],
)
def test_forbidden_actions_are_403(lite, role, method, path):
    r = getattr(lite.client, method)(path, headers=lite.auth(role))
    assert r.status_code == 403, r.text


def test_level_above_role_is_403(lite):
    lite.init_keys()
    body = {"texts": ["some text here"], "max_level": 2}
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json=body)
    assert r.status_code == 403
    assert "level 2" in r.json()["detail"]


def _ec_jwks(tmp_path, alg_field="ES256"):
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="idp-1", use="sig")
    if alg_field:
        jwk["alg"] = alg_field
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


def test_es256_jwks_file(make_service, sqlite_url, tmp_path):
    key, path = _ec_jwks(tmp_path)
    svc = make_service(sqlite_url, dev_mode=False, jwks_file=path)
    good = jwt.encode(claims(svc), key, algorithm="ES256", headers={"kid": "idp-1"})
    assert get_keys(svc, good).status_code == 200
    # Same key, other EC algorithm: one algorithm per key.
    _, p, sig = good.split(".")
    other = b64u(json.dumps({"alg": "ES384", "kid": "idp-1"}).encode())
    assert get_keys(svc, f"{other}.{p}.{sig}").status_code == 401
    # HS256 keyed with the JWK's public coordinates.
    h = b64u(json.dumps({"alg": "HS256", "kid": "idp-1"}).encode())
    p = b64u(json.dumps(claims(svc)).encode())
    sig = hmac.new(path.read_bytes(), f"{h}.{p}".encode(), hashlib.sha256).digest()
    assert get_keys(svc, f"{h}.{p}.{b64u(sig)}").status_code == 401


@pytest.mark.parametrize(
    "jwk",
    [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hs"},
        {"kty": "EC", "crv": "P-256", "kid": "x", "alg": "HS256", "x": "AA", "y": "AA"},
        {"kty": "RSA", "kid": "r", "n": "AQAB", "e": "AQAB"},
        {"kty": "OKP", "crv": "Ed25519", "x": "AA"},
        {"kty": "OKP", "crv": "Ed25519", "x": b64u(b"\0" * 32), "d": b64u(b"\0" * 32), "kid": "priv"},
    ],
)
def test_jwks_rejects_symmetric_mixed_or_private_keys(jwk):
    with pytest.raises(JwksError):
        parse_jwks({"keys": [jwk]}, "test")


def test_leeway_setting_is_capped():
    from pydantic import ValidationError

    from verifier.base.settings import Settings

    with pytest.raises(ValidationError):
        Settings(jwt_leeway_seconds=61)


def test_jwks_url_is_fetched_and_cached(make_service, sqlite_url, monkeypatch, tmp_path):
    import httpx

    key, path = _ec_jwks(tmp_path)
    calls = []

    def fake_get(url, **kw):
        calls.append(url)
        return httpx.Response(200, content=path.read_bytes(), request=httpx.Request("GET", url))

    monkeypatch.setattr("verifier.auth.jwt.httpx.get", fake_get)
    svc = make_service(sqlite_url, dev_mode=False, jwks_url="https://idp.example/jwks.json")
    tok = jwt.encode(claims(svc), key, algorithm="ES256", headers={"kid": "idp-1"})
    assert get_keys(svc, tok).status_code == 200
    assert get_keys(svc, tok).status_code == 200
    assert calls == ["https://idp.example/jwks.json"]
    # Unknown kid: one refetch at most per refresh interval, then 401.
    bad = jwt.encode(claims(svc), key, algorithm="ES256", headers={"kid": "idp-2"})
    assert get_keys(svc, bad).status_code == 401
    assert get_keys(svc, bad).status_code == 401
    assert len(calls) == 1
