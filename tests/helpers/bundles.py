"""Signed bundles for SDK tests: a stand-in service signing key, its pinned verifier key, and `hero-bundle-3`
bundles sealed to a provider key and signed with it (what `POST /v1/keys/generation-bundle` returns)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit.transparency import raw_public, verifier_key

ORIGIN = "hero.test/log"
SERVICE_KEY = Ed25519PrivateKey.generate()
SERVICE_VKEY = verifier_key(ORIGIN, raw_public(SERVICE_KEY.public_key()))
PROVIDER = "acme"


def signer_id() -> str:
    """How a bundle signed with SERVICE_KEY names its signer (`<origin>+<key id hex>`)."""
    return "+".join(SERVICE_VKEY.split("+", 2)[:2])


def header(profile, keyset, *, provider_id: str = PROVIDER, bundle_id: str = "b" * 32,
           ttl: timedelta = timedelta(hours=1)) -> dict:
    now = datetime.now(UTC).replace(microsecond=0)
    return {"bundle_id": bundle_id, "provider_id": provider_id, "profile": profile.to_dict(),
            "key_versions": {str(t.level): t.version for t in keyset.tables}, "issued_at": now.isoformat(),
            "expires_at": (now + ttl).isoformat(), "etag": "t"}


def signed(hdr: dict, keyset, public_key: bytes, key_type: str = "x25519",
           signing_key: Ed25519PrivateKey = SERVICE_KEY, origin: str = ORIGIN) -> bytes:
    from verifier.provider.bundle import seal_bundle_v3

    return seal_bundle_v3(hdr, keyset, public_key, key_type, signing_key, origin)


def open_signed(bundle, private_key: bytes, provider_id: str = PROVIDER, **kw):
    """`open_bundle` with the test service's key pinned."""
    from verifier.provider.bundle import open_bundle

    return open_bundle(bundle, private_key, service_key=SERVICE_VKEY, provider_id=provider_id, **kw)
