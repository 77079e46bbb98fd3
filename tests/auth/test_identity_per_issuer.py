"""Identity per issuer.

Before (7ed75c2): HERO_ROLE_MAP / HERO_JWT_ROLE_CLAIM / HERO_JWT_AUDIENCE applied to every OIDC issuer alike, so a
user of issuer B in group `hero-admins` became a HeRo admin and rotated a key (201) where the operator meant that
group for issuer A only; a Cognito access token (no `aud`, a `client_id`) was refused whatever the settings; with a
dotted role claim a literal top-level claim `"realm_access.roles"` won over the nested value; audit events named
no issuer. Each test below failed there as its docstring says."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import ValidationError

from tests.auth.test_identity import FakeIdPs, _bearer, _jwk, idps  # noqa: F401  (idps: a fixture)
from verifier.auth.jwt import AuthError, TokenVerifier, claim_at
from verifier.base.settings import Settings

COGNITO = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCd"


def test_a_dotted_claim_reads_only_the_nested_value():
    """Before: `claim_at` returned the literal top-level `realm_access.roles` (["hero-admins"], which a client can
    add) over the IdP-managed nested moderator role: admin."""
    claims = {"realm_access.roles": ["hero-admins"], "realm_access": {"roles": ["hero-moderators"]},
              "https://example.com/roles": ["hero-auditors"], "role": "auditor"}
    assert claim_at(claims, "realm_access.roles") == ["hero-moderators"]
    assert claim_at({"realm_access.roles": ["hero-admins"]}, "realm_access.roles") is None
    assert claim_at(claims, "https://example.com/roles") == ["hero-auditors"]  # a namespaced URL: top level
    assert claim_at(claims, "role") == "auditor"


def _cognito_token(key, **claims) -> str:
    now = int(time.time())
    body = {"iss": COGNITO, "sub": "u-1", "token_use": "access", "client_id": "app-client-1", "iat": now,
            "exp": now + 600, "cognito:groups": ["hero-auditors"], "jti": "j-1", **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "c1"})


@pytest.fixture(scope="module")
def cognito_key():
    return rsa.generate_private_key(65537, 2048)


def _verifier(key, **issuer) -> TokenVerifier:
    fake = FakeIdPs()
    fake.add(COGNITO, [_jwk(key, "c1", "RS256")])
    conf = {"issuer": COGNITO, "audience": "app-client-1", "role_claim": "cognito:groups",
            "role_map": {"hero-auditors": "auditor"}, **issuer}
    s = Settings(dev_mode=False, jwks_file=None, jwks_url=None, oidc_issuers=json.dumps([conf]), jwks_wait_seconds=5)
    return TokenVerifier(s, fetch=fake)


def test_a_cognito_access_token_is_accepted_when_its_issuer_says_so(cognito_key):
    """Before: refused whatever the settings (`aud` was required and checked against HERO_JWT_AUDIENCE)."""
    v = _verifier(cognito_key, audience_claim="client_id")
    got = v.verify(_cognito_token(cognito_key))
    assert (got.sub, got.role) == ("u-1", "auditor")
    with pytest.raises(AuthError, match="audience"):  # another app client of the same pool
        v.verify(_cognito_token(cognito_key, client_id="app-client-2"))
    with pytest.raises(AuthError, match="audience"):
        v.verify(_cognito_token(cognito_key, client_id=["app-client-1"]))


def test_a_cognito_access_token_is_refused_where_the_issuer_reads_aud(cognito_key):
    v = _verifier(cognito_key)  # audience_claim: "aud" (the default)
    with pytest.raises(AuthError, match="aud"):
        v.verify(_cognito_token(cognito_key))
    assert v.verify(_cognito_token(cognito_key, aud="app-client-1")).role == "auditor"


def test_issuer_settings_are_checked():
    for bad in ('[{"issuer": "http://idp.example", "audience": "x"}]', '[{"issuer": "https://a.example"}]',
                '[{"issuer": "https://a.example", "audience": "x", "role_map": {"": "admin"}}]',
                '[{"issuer": "https://a.example", "audience": "x", "nope": 1}]', "{not json", "/no/such/file"):
        with pytest.raises(ValidationError):
            Settings(oidc_issuers=bad)
    with pytest.raises(ValidationError, match="named once"):
        Settings(oidc_issuer=["https://a.example"], oidc_issuers='[{"issuer": "https://a.example", "audience": "x"}]')


def test_issuers_from_a_file(tmp_path):
    f = tmp_path / "issuers.json"
    f.write_text(json.dumps([{"issuer": "https://a.example", "audience": ["x", "y"]}]))
    (conf,) = Settings(oidc_issuers=str(f)).oidc_issuers
    assert conf.audience == ["x", "y"] and conf.role_map == {} and conf.audience_claim == "aud"


@pytest.mark.slow
def test_two_real_issuers_each_with_its_own_map(idps, make_service, sqlite_url):  # noqa: F811
    """The group `hero-admins` grants admin at issuer A only; at issuer B it means nothing (B maps its own
    `b-admins`). Before: B's `hero-admins` user rotated a key (201). Audit events carry the issuer, and one `sub`
    at two issuers is two subjects (its own jobs, its own `expect` count)."""
    a, b, _ = idps
    issuers = [{"issuer": a.issuer, "audience": "hero-verifier", "role_claim": "groups",
                "role_map": {"hero-admins": "admin", "hero-auditors": "auditor"}},
               {"issuer": b.issuer, "audience": "hero-verifier", "role_claim": "groups",
                "role_map": {"b-admins": "admin", "b-auditors": "auditor"}}]
    svc = make_service(sqlite_url, oidc_issuers=json.dumps(issuers))
    admin_a = a.id_token("alice", {"groups": ["hero-admins"]})
    r = svc.client.post("/v1/keys/init", headers=_bearer(admin_a))
    assert r.status_code == 201, r.text
    admin_b = b.id_token("alice", {"groups": ["hero-admins"]})
    r = svc.client.post("/v1/keys/1/rotate", headers=_bearer(admin_b))
    assert r.status_code == 403 and "no role this service maps" in r.json()["detail"], r.text
    r = svc.client.post("/v1/keys/1/rotate", headers=_bearer(b.id_token("bob", {"groups": ["b-admins"]})))
    assert r.status_code == 201, r.text
    events = svc.client.get("/v1/audit/events?limit=100", headers=_bearer(admin_a)).json()["events"]
    mine = [(e["action"], e["subject"], e["issuer"]) for e in events if e["action"].startswith("keys.")]
    assert ("keys.init", "alice", a.issuer) in mine and ("keys.rotate", "bob", b.issuer) in mine
    # one sub at two issuers: two `expect` counts
    aud_a, aud_b = (x.id_token("carol", {"groups": [g]}) for x, g in ((a, "hero-auditors"), (b, "b-auditors")))
    text = "A human sentence about the weather, which was fine, and the trains, which were late."
    for tok in (aud_a, aud_b):
        r = svc.client.post("/v1/verify", headers=_bearer(tok), json={"texts": [text], "expect": {"user": 3}})
        assert r.status_code == 200 and r.json()["results"][0]["expected"][0]["values_asked"] == 1, r.text
