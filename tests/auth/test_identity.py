"""The organisation's IdP: RS256 / PS256 / ES384 keys, OIDC discovery, role claims as paths holding lists, a role
map, the policy's rule for several roles, and several issuers.

The end-to-end tests run real OpenID Connect provider processes (PyPI `oidc-provider-mock`: discovery, JWKS,
authorization-code flow, RS256 ID tokens without `kid` or `jti`) and send their ID tokens to the service.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from verifier.auth.jwt import AuthError, TokenVerifier, claim_at, mapped_roles
from verifier.auth.policy import PolicyError, load_policy
from verifier.base.errors import Forbidden
from verifier.base.settings import Settings

ROLES = Path(__file__).resolve().parents[2] / "policies" / "roles.yaml"
ROLE_MAP = {"hero-auditors": "auditor", "hero-moderators": "moderator", "hero-admins": "admin"}
AUDIT = "/v1/audit/events?limit=1"  # audit.read: auditors and admins, not moderators


# -- unit: keys, claims, policy -----------------------------------------------------------------------------
def _jwk(key, kid: str, alg: str | None) -> dict:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()) if isinstance(key, rsa.RSAPrivateKey)
                     else jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", **({"alg": alg} if alg else {})}


def _claims(iss: str, **extra) -> dict:
    now = int(time.time())
    return {"iss": iss, "aud": "hero-verifier", "sub": "s-1", "iat": now, "exp": now + 600, **extra}


class FakeIdPs:
    """Discovery documents and JWKS of hand-made issuers, served through TokenVerifier's `fetch` hook."""

    def __init__(self) -> None:
        self.docs: dict[str, object] = {}

    def add(self, issuer: str, keys: list[dict], doc_issuer: str | None = None) -> None:
        self.docs[issuer + "/.well-known/openid-configuration"] = {"issuer": doc_issuer or issuer,
                                                                   "jwks_uri": issuer + "/keys"}
        self.docs[issuer + "/keys"] = {"keys": keys}

    def __call__(self, url: str) -> object:
        if url not in self.docs:
            raise httpx.ConnectError("no such document")
        return self.docs[url]


def _verifier(issuers: list[str], fetch, **kw) -> TokenVerifier:
    s = Settings(dev_mode=False, jwks_file=None, jwks_url=None, oidc_issuer=issuers, jwks_wait_seconds=5, **kw)
    return TokenVerifier(s, fetch=fetch)


def test_rs256_ps256_es384_keys_verify_and_one_issuers_key_never_vouches_for_another():
    rs, ps = rsa.generate_private_key(65537, 2048), rsa.generate_private_key(65537, 3072)
    es = ec.generate_private_key(ec.SECP384R1())
    other = rsa.generate_private_key(65537, 2048)
    idps = FakeIdPs()
    idps.add("https://a.example", [_jwk(rs, "rs", None), _jwk(ps, "ps", "PS256"), _jwk(es, "es", None)])
    idps.add("https://b.example", [_jwk(other, "b1", "RS256")])
    v = _verifier(["https://a.example", "https://b.example"], idps, jwt_role_claim="roles",
                  role_map=ROLE_MAP)
    c = _claims("https://a.example", roles=["hero-auditors"], jti="j")
    for key, kid, alg in ((rs, "rs", "RS256"), (ps, "ps", "PS256"), (es, "es", "ES384")):
        got = v.verify(jwt.encode(c, key, algorithm=alg, headers={"kid": kid}))
        assert (got.role, got.roles, got.sub) == ("auditor", ("auditor",), "s-1")
    # a key accepts only its own algorithm: PS256 under the RS256 key, RS256 under the PS256 key
    for key, kid, alg in ((rs, "rs", "PS256"), (ps, "ps", "RS256")):
        with pytest.raises(AuthError, match="algorithm not allowed"):
            v.verify(jwt.encode(c, key, algorithm=alg, headers={"kid": kid}))
    # issuer b's key (and kid) on a token naming issuer a: a's keys do not know it
    with pytest.raises(AuthError, match="unknown key id"):
        v.verify(jwt.encode(c, other, algorithm="RS256", headers={"kid": "b1"}))
    # and an issuer nobody configured is refused before any key lookup
    with pytest.raises(AuthError, match="issuer not accepted"):
        v.verify(jwt.encode({**c, "iss": "https://c.example"}, other, algorithm="RS256", headers={"kid": "b1"}))


def test_weak_or_foreign_keys_and_a_lying_discovery_document_give_no_key():
    from verifier.auth.jwt import JwksError, parse_jwks

    small = rsa.generate_private_key(65537, 1024)
    with pytest.raises(JwksError, match="2048"):
        parse_jwks({"keys": [_jwk(small, "s", "RS256")]}, "t")
    with pytest.raises(JwksError, match="RS256 or PS256"):
        parse_jwks({"keys": [_jwk(rsa.generate_private_key(65537, 2048), "r", "RS512")]}, "t")
    good = rsa.generate_private_key(65537, 2048)
    idps = FakeIdPs()
    idps.add("https://a.example", [_jwk(good, "k", "RS256")], doc_issuer="https://evil.example")
    v = _verifier(["https://a.example"], idps)
    with pytest.raises(AuthError, match="unknown key id"):
        v.verify(jwt.encode(_claims("https://a.example", role="auditor", jti="j"), good, algorithm="RS256",
                            headers={"kid": "k"}))


def test_role_claim_paths_lists_and_the_role_map():
    raw = {"realm_access": {"roles": ["offline_access", "hero-auditors"]}, "https://x.example/roles": ["a"],
           "role": "moderator"}
    assert claim_at(raw, "realm_access.roles") == ["offline_access", "hero-auditors"]
    assert claim_at(raw, "https://x.example/roles") == ["a"] and claim_at(raw, "realm_access.nope") is None
    assert mapped_roles(raw["realm_access"]["roles"], "c", ROLE_MAP) == ("auditor",)
    assert mapped_roles(["hero-auditors", "hero-moderators", "hero-auditors"], "c", ROLE_MAP) == ("auditor",
                                                                                                  "moderator")
    assert mapped_roles(["staff"], "c", ROLE_MAP) == ()  # nothing mapped: the policy's 403
    assert mapped_roles("moderator", "c", {}) == ("moderator",)  # no map: the value is the HeRo role
    for bad in (None, [], [1], {"a": 1}, ["x"] * 65, ""):
        with pytest.raises(AuthError):
            mapped_roles(bad, "c", ROLE_MAP)


def test_several_roles_are_refused_unless_the_policy_names_the_highest(tmp_path):
    policy = load_policy(ROLES)
    assert policy.multiple_roles == "refuse"
    assert policy.resolve(("auditor",)) == "auditor"
    with pytest.raises(Forbidden, match="several roles"):
        policy.resolve(("moderator", "auditor"))
    with pytest.raises(Forbidden, match="no role this service maps"):
        policy.resolve(())
    text = ROLES.read_text().replace("multiple_roles: refuse", "multiple_roles: highest")
    (tmp_path / "roles.yaml").write_text(text)
    assert load_policy(tmp_path / "roles.yaml").resolve(("moderator", "auditor")) == "auditor"
    (tmp_path / "bad.yaml").write_text(text.replace("role_order: [admin, auditor, moderator, provider]",
                                                    "role_order: [admin, auditor]"))
    with pytest.raises(PolicyError, match="rank every role"):
        load_policy(tmp_path / "bad.yaml")


def test_issuer_settings_are_checked():
    from pydantic import ValidationError

    assert Settings(oidc_issuer="https://a.example/realms/x, https://b.example/").oidc_issuer == [
        "https://a.example/realms/x", "https://b.example/"]
    for bad in ("http://idp.example", "https://a.example/?x=1", "ftp://a"):
        with pytest.raises(ValidationError):
            Settings(oidc_issuer=bad)
    with pytest.raises(ValidationError):
        Settings(role_map={"": "auditor"})


# -- end to end: real OIDC provider processes ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MockIdP:
    """One `oidc-provider-mock` process: an OpenID Connect provider on a loopback port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.issuer = f"http://localhost:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "oidc_provider_mock", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.issuer + "/.well-known/openid-configuration", timeout=2).raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("oidc-provider-mock did not start") from None
                time.sleep(0.1)

    def id_token(self, sub: str, claims: dict, client_id: str = "hero-verifier") -> str:
        """An ID token for `sub` (with `claims`) through the provider's authorization-code flow."""
        httpx.put(f"{self.issuer}/users/{sub}", json=claims, timeout=10).raise_for_status()
        cb = "http://localhost/cb"
        r = httpx.post(f"{self.issuer}/oauth2/authorize", data={"sub": sub}, timeout=10, params={
            "client_id": client_id, "redirect_uri": cb, "response_type": "code", "scope": "openid", "state": "s"})
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(r.headers["location"]).query)["code"][0]
        t = httpx.post(f"{self.issuer}/oauth2/token", timeout=10, data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": cb, "client_id": client_id,
            "client_secret": "unused"})
        t.raise_for_status()
        return t.json()["id_token"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def idps() -> Iterator[tuple[MockIdP, MockIdP, MockIdP]]:
    if importlib.util.find_spec("oidc_provider_mock") is None:
        pytest.skip("oidc-provider-mock is not installed (pip install -e '.[dev]')")
    started: list[MockIdP] = []
    try:
        for _ in range(3):
            started.append(MockIdP())
        yield started[0], started[1], started[2]
    finally:
        for idp in started:
            idp.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
def test_tokens_of_real_oidc_providers(idps, make_service, sqlite_url, tmp_path):
    keycloak_like, entra_like, stranger = idps
    svc = make_service(sqlite_url, oidc_issuer=[keycloak_like.issuer, entra_like.issuer],
                       jwt_role_claim="realm_access.roles", role_map=ROLE_MAP)
    roles = {"realm_access": {"roles": ["offline_access", "hero-auditors"]}}
    token = keycloak_like.id_token("alice", roles)
    header, body = jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "RS256" and body["iss"] == keycloak_like.issuer
    assert isinstance(body["realm_access"]["roles"], list) and "jti" not in body
    r = svc.client.get(AUDIT, headers=_bearer(token))
    assert r.status_code == 200, r.text  # discovery -> jwks_uri -> RS256 key; the list maps to auditor
    me = svc.client.get("/console/whoami", headers=_bearer(token))
    assert me.status_code == 200 and (me.json()["role"], me.json()["subject"]) == ("auditor", "alice"), me.text
    # the second configured issuer too (several issuers), with its own key set
    r = svc.client.get(AUDIT, headers=_bearer(entra_like.id_token("bob", {"realm_access": {"roles": [
        "hero-admins"]}})))
    assert r.status_code == 200, r.text
    # a provider nobody configured: 401, whatever roles it writes
    r = svc.client.get(AUDIT, headers=_bearer(stranger.id_token("eve", {"realm_access": {"roles": [
        "hero-admins"]}})))
    assert r.status_code == 401 and "issuer" in r.json()["detail"]
    # a role the map does not name: 403; a moderator's token is one, but may not read the audit log
    r = svc.client.get(AUDIT, headers=_bearer(keycloak_like.id_token("carol", {"realm_access": {"roles": [
        "staff"]}})))
    assert r.status_code == 403 and "no role this service maps" in r.json()["detail"]
    mod = keycloak_like.id_token("dan", {"realm_access": {"roles": ["hero-moderators"]}})
    assert svc.client.get(AUDIT, headers=_bearer(mod)).status_code == 403
    # two mapped roles: refused with a clear message under the shipped policy
    both = keycloak_like.id_token("frank", {"realm_access": {"roles": ["hero-moderators", "hero-auditors"]}})
    r = svc.client.get(AUDIT, headers=_bearer(both))
    assert r.status_code == 403 and "several roles" in r.json()["detail"], r.text
    # another audience (a token minted for another client of the same IdP): 401
    other = keycloak_like.id_token("gina", roles, client_id=f"other-app-{uuid.uuid4().hex[:6]}")
    assert svc.client.get(AUDIT, headers=_bearer(other)).status_code == 401
    # ... and where the policy says the highest wins, that token acts as an auditor
    highest = tmp_path / "roles.yaml"
    highest.write_text(ROLES.read_text().replace("multiple_roles: refuse", "multiple_roles: highest"))
    svc2 = make_service(f"sqlite:///{tmp_path / 'two.db'}", oidc_issuer=[keycloak_like.issuer],
                        jwt_role_claim="realm_access.roles", role_map=ROLE_MAP, roles_file=highest)
    assert svc2.client.get(AUDIT, headers=_bearer(both)).status_code == 200

