"""Issued model ids belong to the deployment: POST /v1/keys/init with `models` makes the
deployment's own copy of its profile, POST /v1/keys/issued appends (the list only grows, audited), GET lists."""

from __future__ import annotations

import pytest
from sqlalchemy import select


@pytest.fixture
def fresh(sqlite_url, make_service, monkeypatch):
    monkeypatch.delenv("HERO_PROFILES_DIR", raising=False)
    return make_service(sqlite_url, profile=None)  # a new deployment: the new-deployment profile (v5)


def _audit(svc, action: str) -> list[str | None]:
    from verifier.audit.models import AuditEventRow

    with svc.ctx.db.session() as s:
        return [e.detail for e in s.scalars(select(AuditEventRow).where(AuditEventRow.action == action))]


def test_init_with_models_then_issue_through_the_api(fresh, hero_home):
    svc, admin = fresh, fresh.auth("admin")
    assert svc.ctx.profile.name == "v5"
    r = svc.client.post("/v1/keys/init", headers=admin, json={"models": [37, 41]})
    assert r.status_code == 201, r.text
    assert r.json()["profile"] == "v5-deployment" and len(r.json()["versions"]) == 2
    assert (hero_home / "profiles" / "v5-deployment.yaml").is_file()
    assert svc.ctx.profile.name == "v5-deployment"
    r = svc.client.get("/v1/keys/issued", headers=admin)
    assert r.status_code == 200 and r.json() == {"profile": "v5-deployment", "field": "model", "issued": [37, 41],
                                                 "added": None, "already_issued": None}
    r = svc.client.post("/v1/keys/issued", headers=admin, json={"field": "model", "values": [42]})
    assert r.status_code == 200, r.text
    assert r.json()["issued"] == [37, 41, 42] and r.json()["added"] == [42] and r.json()["already_issued"] == []
    assert svc.ctx.profile.levels[0].issued == (37, 41, 42)  # decodes search the longer list at once
    r = svc.client.post("/v1/keys/issued", headers=admin, json={"values": [42, 37]})
    assert r.status_code == 200 and r.json()["added"] == [] and r.json()["already_issued"] == [37, 42]
    assert svc.client.get("/v1/keys/issued", headers=admin).json()["issued"] == [37, 41, 42]  # only grows
    assert _audit(svc, "keys.issue") == ["v5-deployment model +42", "v5-deployment model +none"]
    assert _audit(svc, "keys.use_profile") == ["- -> v5-deployment"]

    # bad input: clear 4xx, never 500
    for body, status, words in (
        ({"values": [999]}, 422, "0..255"),  # out of the 8-bit field
        ({"values": []}, 422, ""),
        ({"values": ["42"]}, 422, ""),
        ({"values": [1], "extra": 1}, 422, ""),
        ({"field": "nope", "values": [1]}, 404, "no field 'nope'"),
        ({"field": "user", "values": [1]}, 409, "lists no issued values"),
    ):
        r = svc.client.post("/v1/keys/issued", headers=admin, json=body)
        assert r.status_code == status, (body, r.text)
        assert words in r.text
    assert svc.client.get("/v1/keys/issued", headers=admin, params={"field": "Bad!"}).status_code == 422
    # keys exist: a second init with models is a conflict
    r = svc.client.post("/v1/keys/init", headers=admin, json={"models": [37]})
    assert r.status_code == 409, r.text
    # RBAC: keys.write to issue, keys.read to list
    mod = svc.auth("moderator")
    assert svc.client.post("/v1/keys/issued", headers=mod, json={"values": [43]}).status_code == 403
    assert svc.client.get("/v1/keys/issued", headers=mod).status_code == 403
    assert svc.client.post("/v1/keys/issued", json={"values": [43]}).status_code == 401


def test_a_shipped_profile_is_not_issued_to(lite):
    admin = lite.auth("admin")
    lite.init_keys()  # the shipped `default`
    r = lite.client.post("/v1/keys/issued", headers=admin, json={"values": [42]})
    assert r.status_code == 409 and "shipped profile" in r.text and "hero keys init --models" in r.text
    assert lite.client.get("/v1/keys/issued", headers=admin).json()["issued"] is None


def test_init_models_bad_input(fresh):
    admin = fresh.auth("admin")
    for body in ({"models": []}, {"models": ["a"]}, {"models": [300]}, {"models": [1], "x": 2}):
        r = fresh.client.post("/v1/keys/init", headers=admin, json=body)
        assert r.status_code == 422, (body, r.text)
    assert fresh.client.get("/v1/keys", headers=admin).json()["versions"] == []  # nothing made


def test_openapi_documents_the_issued_routes(lite):
    spec = lite.client.get("/openapi.json").json()
    post = spec["paths"]["/v1/keys/issued"]["post"]["responses"]
    assert {"200", "401", "403", "404", "409", "422"} <= set(post)
    assert {"200", "401", "403"} <= set(spec["paths"]["/v1/keys/issued"]["get"]["responses"])
    assert "profile" in spec["components"]["schemas"]["ResultOut"]["properties"]
