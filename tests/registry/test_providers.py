"""Provider registry and sealed generation-key bundles through HTTP."""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers.service import secret_forms
from verifier.provider import BundleError, generate_keypair
from verifier.provider import open_bundle as _open_bundle

BUNDLE = "/v1/keys/generation-bundle"


def _service_key(svc, pid="acme") -> str:
    """What a provider pins: the service's verifier key, as `GET /v1/audit/public-key` answers its own token."""
    r = svc.client.get("/v1/audit/public-key", headers=svc.auth("provider", pid))
    assert r.status_code == 200, r.text
    assert r.text.strip() == svc.ctx.signer.vkey
    return r.text


def _open(svc, bundle, sk, pid="acme", **kw):
    return _open_bundle(bundle, sk, service_key=_service_key(svc, pid), provider_id=pid, **kw)


def _events(svc, action=None):
    evs = svc.client.get("/v1/audit/events?limit=1000", headers=svc.auth("admin", "root")).json()["events"]
    return [e for e in evs if action is None or e["action"] == action]


def _register(svc, pid="acme", **extra):
    sk, pk = generate_keypair()
    body = {"provider_id": pid, "public_key": base64.b64encode(pk).decode(), **extra}
    r = svc.client.post("/v1/providers", headers=svc.auth("admin", "root"), json=body)
    assert r.status_code == 201, r.text
    return sk, r.json()


def _fetch(svc, pid="acme", **headers):
    return svc.client.post(BUNDLE, headers={**svc.auth("provider", pid), **headers}, json={})


def test_register_list_revoke_are_admin_only_and_audited(svc):
    _sk, out = _register(svc)
    assert out["status"] == "active" and out["created_by"] == "root" and out["revoked_at"] is None
    admin = svc.auth("admin", "root")
    assert svc.client.post("/v1/providers", headers=admin, json={
        "provider_id": "acme", "public_key": out["public_key"]}).status_code == 409
    for bad in ({"provider_id": "x y", "public_key": out["public_key"]},
                {"provider_id": "p2", "public_key": base64.b64encode(bytes(32)).decode()},  # low-order point
                {"provider_id": "p2", "public_key": "AAAA"},
                {"provider_id": "p2", "public_key": out["public_key"], "extra": 1},
                {"provider_id": "p2", "public_key": out["public_key"],
                 "expires_at": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}):
        r = svc.client.post("/v1/providers", headers=admin, json=bad)
        assert r.status_code == 422, (bad, r.text)
    for role in ("moderator", "auditor", "provider"):
        h = svc.auth(role, "acme")
        assert svc.client.post("/v1/providers", headers=h, json={
            "provider_id": "p3", "public_key": out["public_key"]}).status_code == 403
        assert svc.client.get("/v1/providers", headers=h).status_code == 403
        assert svc.client.post("/v1/providers/acme/revoke", headers=h).status_code == 403
    listed = svc.client.get("/v1/providers", headers=admin).json()["providers"]
    assert [p["provider_id"] for p in listed] == ["acme"]
    r = svc.client.post("/v1/providers/acme/revoke", headers=admin)
    assert r.status_code == 200 and r.json()["status"] == "revoked" and r.json()["revoked_at"]
    assert svc.client.post("/v1/providers/nobody/revoke", headers=admin).status_code == 404
    assert [e["action"] for e in _events(svc) if e["action"].startswith("providers.")] == [
        "providers.add", "providers.revoke"]


def test_bundle_opens_with_the_providers_key_and_is_audited_with_a_receipt(svc):
    from verifier.audit.transparency import verify_receipt

    svc.init_keys()
    sk, _ = _register(svc)
    r = _fetch(svc)
    assert r.status_code == 200, r.text
    body = r.json()
    assert r.headers["etag"] == f'"{body["etag"]}"' and r.headers["cache-control"] == "no-store"
    prof = svc.ctx.profile
    assert body["key_versions"] == {str(lv): f"l{lv}-v1" for lv in range(1, prof.depth + 1)}
    b = _open(svc, body["bundle"], sk)
    assert b.profile == prof and b.provider_id == "acme" and b.bundle_id == body["bundle_id"]
    assert [len(t.entries) for t in b.keyset.tables] == [1 << lv.key_bits for lv in prof.levels]
    active = svc.ctx.store.active_keyset(prof)
    assert b.keyset.tables == active.tables  # exactly the tables `hero generate` uses
    assert b.expires_at > datetime.now(UTC) + timedelta(hours=23)
    # audited: one keys.bundle event for the provider, with a receipt that checks offline
    ev = _events(svc, "keys.bundle")
    assert len(ev) == 1 and ev[0]["subject"] == "acme" and ev[0]["role"] == "provider"
    assert body["bundle_id"] in ev[0]["detail"] and ev[0]["key_version"] == "l1-v1,l2-v1"
    assert verify_receipt(body["receipt"], svc.ctx.signer.vkey).size >= 1
    assert body["receipt"]["event"]["action"] == "keys.bundle"
    # another provider's key does not open it
    other, _ = generate_keypair()
    with pytest.raises(BundleError):
        _open(svc, body["bundle"], other)
    # signed by the service's log key: another pinned key, or another provider id, refuses it
    from tests.helpers.bundles import SERVICE_VKEY

    with pytest.raises(BundleError, match="signature is not valid"):
        _open_bundle(body["bundle"], sk, service_key=SERVICE_VKEY, provider_id="acme")
    with pytest.raises(BundleError, match="another provider"):
        _open_bundle(body["bundle"], sk, service_key=svc.ctx.signer.vkey, provider_id="acme-2")


def test_etag_polls_answer_304_until_a_rotation(svc):
    svc.init_keys()
    sk, _ = _register(svc)
    first = _fetch(svc).json()
    r = _fetch(svc, **{"If-None-Match": f'"{first["etag"]}"'})
    assert r.status_code == 304 and r.headers["etag"] == f'"{first["etag"]}"' and not r.content
    assert len(_events(svc, "keys.bundle")) == 1  # a 304 moves no key and is not an issuance
    tags = f'W/"x", "{first["etag"]}"'
    no_body = svc.client.post(BUNDLE, headers={**svc.auth("provider", "acme"), "If-None-Match": tags})
    assert no_body.status_code == 304  # no body at all; a list of tags
    again = _fetch(svc).json()  # no If-None-Match: a fresh bundle (new id, same etag)
    assert again["etag"] == first["etag"] and again["bundle_id"] != first["bundle_id"]
    assert svc.client.post("/v1/keys/2/rotate", headers=svc.auth("admin", "root")).status_code == 201
    r = _fetch(svc, **{"If-None-Match": f'"{first["etag"]}"'})
    assert r.status_code == 200 and r.json()["etag"] != first["etag"]
    assert r.json()["key_versions"] == {"1": "l1-v1", "2": "l2-v2"}
    assert _open(svc, r.json()["bundle"], sk).key_versions == {1: "l1-v1", 2: "l2-v2"}


def test_who_cannot_get_a_bundle(svc):
    svc.init_keys()
    _sk, _ = _register(svc)
    _register(svc, "shortlived", expires_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat())
    for role in ("moderator", "auditor", "admin"):
        r = svc.client.post(BUNDLE, headers=svc.auth(role, "acme"), json={})
        assert r.status_code == 403 and "bundle" not in r.json(), role
    assert _fetch(svc, "stranger").status_code == 403  # provider role, but not registered
    assert svc.client.post(BUNDLE, json={}).status_code == 401
    assert svc.client.post(BUNDLE, headers=svc.auth("provider", "acme"), json={"profile": "other"}).status_code == 404
    # expired registration
    from verifier.registry.models import ProviderRow

    with svc.ctx.db.session() as s:
        s.get(ProviderRow, "shortlived").expires_at = datetime.now(UTC) - timedelta(seconds=1)
    assert _fetch(svc, "shortlived").status_code == 403
    # revoked
    assert _fetch(svc).status_code == 200
    svc.client.post("/v1/providers/acme/revoke", headers=svc.auth("admin", "root"))
    r = _fetch(svc)
    assert r.status_code == 403 and r.json() == {"detail": "not an active registered provider"}
    assert len(_events(svc, "keys.bundle")) == 1


def test_bundle_expiry_never_outlives_the_registration(lite):
    lite.init_keys()
    until = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    sk, _ = _register(lite, expires_at=until.isoformat())
    body = _fetch(lite).json()
    assert datetime.fromisoformat(body["expires_at"]) == until
    assert _open(lite, body["bundle"], sk).expires_at == until


def test_no_bundle_without_its_audit_event(lite, monkeypatch):
    from verifier.audit.service import AuditUnavailable

    lite.init_keys()
    _register(lite)

    def broken(*a, **k):
        raise AuditUnavailable("audit log unavailable (OperationalError)")

    monkeypatch.setattr("verifier.registry.service.record_with_receipts", broken)
    r = _fetch(lite)
    assert r.status_code == 503 and "bundle" not in r.json()


def test_no_key_bytes_in_logs_responses_or_the_database(lite, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    lite.init_keys()
    sk, _ = _register(lite)
    bodies = [_fetch(lite).json()]
    lite.client.post("/v1/keys/1/rotate", headers=lite.auth("admin", "root"))
    bodies.append(_fetch(lite).json())
    for role in ("moderator", "auditor", "admin"):
        bodies.append(lite.client.post(BUNDLE, headers=lite.auth(role, "acme"), json={}).json())
    bodies.append(lite.client.get("/v1/providers", headers=lite.auth("admin", "root")).json())
    bodies.append(lite.client.get("/v1/audit/events?limit=1000", headers=lite.auth("admin", "root")).json())
    forms = secret_forms(lite)
    assert len(forms) > 1000  # every entry of every table, in six encodings
    haystack = ("\n".join(map(str, bodies)) + "\n" + caplog.text).encode()
    haystack += "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records).encode()
    files = list(tmp_path.rglob("*.db*"))  # the SQLite database with its -wal / -shm files
    assert any(p.name == "service.db" for p in files)
    lite.ctx.db.dispose()
    disk = b"".join(p.read_bytes() for p in files if p.exists())
    for f in forms:
        assert f not in haystack
        assert f not in disk
    # ... while the bundle in the response does carry them (sealed): it opens to the live tables
    assert _open(lite, bodies[1]["bundle"], sk).keyset.tables[1].entries[0] in forms


def test_bundle_source_polls_with_etag_and_picks_up_a_rotation(lite):
    """The SDK's refresher against the real endpoint (TestClient is an httpx.Client)."""
    from verifier.provider import BundleFetchError, BundleSource

    lite.init_keys()
    sk, _ = _register(lite)
    seen = []
    src = BundleSource(sk, lambda: lite.token("provider", "acme"), client=lite.client, interval_s=0.05,
                       on_change=seen.append, service_key=_service_key(lite))
    first = src.bundle
    assert first.key_versions == {1: "l1-v1", 2: "l2-v1"} and seen == [first]
    assert src.refresh() is False and src.not_modified == 1  # 304: nothing new
    with src:
        lite.client.post("/v1/keys/1/rotate", headers=lite.auth("admin", "root"))
        new = src.wait_for_change(first.etag, timeout_s=20)
    assert new is not None and new.key_versions == {1: "l1-v2", 2: "l2-v1"} and src.last_error is None
    assert src.bundle is new
    bad = BundleSource(sk, lambda: lite.token("provider", "stranger"), client=lite.client,
                       service_key=lite.ctx.signer.vkey)
    with pytest.raises(BundleFetchError) as err:
        bad.refresh()
    assert err.value.status == 403


def test_registration_expiry_bounds(lite):
    _, pk = generate_keypair()
    b64 = base64.b64encode(pk).decode()
    admin = lite.auth("admin", "root")
    for when in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "2400-01-01T00:00:00Z"):
        r = lite.client.post("/v1/providers", headers=admin, json={"provider_id": "p", "public_key": b64,
                                                                   "expires_at": when})
        assert r.status_code == 422, (when, r.text)
    r = lite.client.post("/v1/providers", headers=admin, json={"provider_id": "p", "public_key": b64,
                                                               "expires_at": "2090-01-01T00:00:00"})  # naive = UTC
    assert r.status_code == 201 and r.json()["expires_at"] == "2090-01-01T00:00:00+00:00"


def test_bundle_lifetime_follows_the_setting(make_service, sqlite_url):
    svc = make_service(sqlite_url, bundle_ttl_seconds=600)
    svc.init_keys()
    sk, _ = _register(svc)
    before = datetime.now(UTC).replace(microsecond=0)  # bounds around the issue time, not a guess at its speed
    b = _open(svc, _fetch(svc).json()["bundle"], sk)
    after = datetime.now(UTC)
    assert before + timedelta(seconds=600) <= b.expires_at <= after + timedelta(seconds=600)


def test_hero_client_against_the_service(lite):
    from verifier.client import HeroAPIError, HeroClient

    lite.init_keys()
    hero = HeroClient(client=lite.client, token=lambda: lite.token("moderator", "mod-1"))
    [r] = hero.verify(["An ordinary sentence that nobody watermarked at all, written by hand."])
    assert not r.watermarked and [lv.level for lv in r.levels] == [1] and r.receipt["event"]["subject"] == "mod-1"
    job = hero.submit_job(["first plain text here", "second plain text here"])
    results = list(hero.iter_results(job, poll_s=0.05, timeout_s=120))
    assert len(results) == 2 and not any(x.watermarked for x in results)
    prov = HeroClient(client=lite.client, token=lite.token("provider", "acme"))
    with pytest.raises(HeroAPIError) as err:
        prov.verify(["x"])
    assert err.value.status == 403


@pytest.mark.parametrize("key_type", ["x25519", "mlkem768-x25519"])
def test_providers_register_their_key_type_and_get_hero_bundle_3(lite, key_type):
    from verifier.provider import read_header

    lite.init_keys()
    sk, pk = generate_keypair(key_type)
    body = {"provider_id": "pq", "public_key": base64.b64encode(pk).decode(), "key_type": key_type}
    r = lite.client.post("/v1/providers", headers=lite.auth("admin", "root"), json=body)
    assert r.status_code == 201, r.text
    assert r.json()["key_type"] == key_type and base64.b64decode(r.json()["public_key"]) == pk
    assert f"key {key_type} sha256:" in _events(lite, "providers.add")[0]["detail"]
    got = _fetch(lite, "pq")
    assert got.status_code == 200, got.text
    header = read_header(got.json()["bundle"])
    assert header["format"] == "hero-bundle-3" and header["key_type"] == key_type
    assert header["signer"] == "+".join(lite.ctx.signer.vkey.split("+", 2)[:2])
    opened = _open(lite, got.json()["bundle"], sk, pid="pq")
    assert opened.keyset.tables == lite.ctx.store.active_keyset(lite.ctx.profile).tables
    bad = {**body, "provider_id": "pq2", "public_key": base64.b64encode(pk[:-1]).decode()}
    assert lite.client.post("/v1/providers", headers=lite.auth("admin", "root"), json=bad).status_code == 422
    wrong = {**body, "provider_id": "pq3", "key_type": "rsa"}
    assert lite.client.post("/v1/providers", headers=lite.auth("admin", "root"), json=wrong).status_code == 422
