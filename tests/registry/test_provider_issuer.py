"""The provider registry keyed by (issuer, sub), like every other subject.

Before (49e0a88): a provider was its `sub` alone, so with two trusted issuers, a token of issuer B whose `sub` was
a provider registered for issuer A got A's sealed generation keys (`active_provider(db, actor.subject)`; the
first test below got a bundle for issuer B's token there). Now the registry records the issuer; a row registered
before it did (issuer "") is accepted only while the service trusts a single issuer."""

from __future__ import annotations

import base64
import logging

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from verifier.audit.service import Actor
from verifier.base.db import alembic_config, upgrade
from verifier.base.errors import InvalidInput
from verifier.provider import generate_keypair
from verifier.registry import service
from verifier.registry.service import ProviderForbidden, trusted_issuers

A, B = "https://a.example", "https://b.example"
ADMIN = Actor("root", "admin", "j-admin", "hero-dev")


def _pk() -> str:
    return base64.b64encode(generate_keypair()[1]).decode()


def _bundle(lite, actor, trusted):
    ctx = lite.ctx
    return service.issue_bundle(ctx.db, ctx.store, ctx.profile, actor, signer=ctx.signer, trusted=trusted)


def test_a_provider_is_the_sub_of_its_own_issuer_only(lite):
    lite.init_keys()
    trusted = ("hero-dev", A, B)
    row = service.register(lite.ctx.db, "acme", _pk(), ADMIN, issuer=A, trusted=trusted)
    assert service.provider_meta(row)["issuer"] == A
    assert _bundle(lite, Actor("acme", "provider", "j1", A), trusted).key_versions
    for other in (B, "hero-dev"):  # the same sub at another trusted issuer is someone else
        with pytest.raises(ProviderForbidden):
            _bundle(lite, Actor("acme", "provider", "j2", other), trusted)
    added = [e for e in lite.client.get("/v1/audit/events?action=providers.add",
                                        headers=lite.auth("admin", "root")).json()["events"]]
    assert f"issuer {A}" in added[-1]["detail"]


def test_registration_names_a_trusted_issuer(lite):
    db = lite.ctx.db
    with pytest.raises(InvalidInput, match="issuer is required"):
        service.register(db, "p1", _pk(), ADMIN, trusted=("hero-dev", A))
    with pytest.raises(InvalidInput, match="not one this service trusts"):
        service.register(db, "p1", _pk(), ADMIN, issuer=B, trusted=("hero-dev", A))
    # through HTTP (dev mode: one trusted issuer, the default)
    admin = lite.auth("admin", "root")
    r = lite.client.post("/v1/providers", headers=admin, json={"provider_id": "p2", "public_key": _pk()})
    assert r.status_code == 201 and r.json()["issuer"] == lite.ctx.settings.jwt_issuer == "hero-dev"
    r = lite.client.post("/v1/providers", headers=admin, json={"provider_id": "p3", "public_key": _pk(),
                                                               "issuer": B})
    assert r.status_code == 422 and "not one this service trusts" in r.json()["detail"]
    assert lite.client.post("/v1/keys/generation-bundle", headers=lite.auth("provider", "p2"),
                            json={}).status_code in (200, 409)  # 409: no keys yet; never 403


def test_trusted_issuers_from_the_settings():
    from verifier.base.settings import Settings

    assert trusted_issuers(Settings(dev_mode=True)) == ("hero-dev",)
    oidc = Settings(dev_mode=False, jwks_file=None, jwks_url=None, oidc_issuer=A)
    assert trusted_issuers(oidc) == (A,)
    assert trusted_issuers(Settings(dev_mode=True, oidc_issuer=f"{A},{B}")) == ("hero-dev", A, B)


def test_a_row_without_issuer_is_accepted_only_on_a_single_issuer_service(lite, caplog):
    lite.init_keys()
    service.register(lite.ctx.db, "old", _pk(), ADMIN, trusted=("hero-dev",))
    with lite.ctx.db.session() as s:  # as migration 0012 leaves a row registered before it
        s.execute(text("UPDATE hero_providers SET issuer = '' WHERE provider_id = 'old'"))
    assert _bundle(lite, Actor("old", "provider", "j1", "hero-dev"), ("hero-dev",)).key_versions
    with caplog.at_level(logging.WARNING, logger="hero.providers"), pytest.raises(ProviderForbidden):
        _bundle(lite, Actor("old", "provider", "j2", A), ("hero-dev", A))
    assert "register it again with its issuer" in caplog.text


def test_0012_gives_existing_providers_no_issuer(sqlite_url):
    upgrade(sqlite_url, "0011")
    engine = create_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO hero_providers (provider_id, public_key, key_type, status, created_at, "
                              "created_by) VALUES ('acme', :k, 'x25519', 'active', '2026-12-01T00:00:00+00:00', "
                              "'root')"), {"k": bytes(range(32))})
        upgrade(sqlite_url, "0012")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT provider_id, issuer FROM hero_providers")).all() == [("acme", "")]
        command.downgrade(alembic_config(sqlite_url), "0011")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT provider_id FROM hero_providers")).all() == [("acme",)]
    finally:
        engine.dispose()
