"""Provider registry and generation-key bundles.

An admin registers a provider (id + X25519 public key, and the issuer of its tokens); the provider, authenticated
as role `provider` by a token of that issuer with `sub` = its id, receives the active key table of every level
sealed to that key and signed with the service's transparency-log key (`hero-bundle-3`, `verifier.provider.bundle`):
the provider checks that signature against the key it pinned, so whoever can place bytes on its bundle path cannot
swap its keys.
Each registration, revocation and bundle issuance commits with its audit event; a bundle is returned only
after its audit event (and transparency receipt) is durable. Key material never reaches a log line, an
exception, the database or a response in clear: the service derives the tables, seals them, and drops them.

A provider is an (issuer, sub) like every other subject (issue 52, N4/N5): a token of another trusted issuer with
the same `sub` is not that provider. A row registered before issuers were recorded (issuer "") is accepted only
while the service trusts a single issuer, where it cannot be anyone else's; with several, it is refused and
logged until it is registered again with its issuer.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import IntegrityError

from verifier.audit.service import Actor, AuditEvent, append_or_fail, record_with_receipts
from verifier.audit.signer import LogSigner
from verifier.base.db import Database
from verifier.base.errors import Conflict, Forbidden, InvalidInput, NotFound
from verifier.engine.profile import Profile
from verifier.keys.decodable import iso
from verifier.keys.service import DbKeyStore
from verifier.provider.bundle import BundleError, canonical_header, parse_public_key, seal_bundle_v3
from verifier.registry import repository as repo
from verifier.registry.models import ProviderRow

log = logging.getLogger("hero.providers")

PROVIDER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
DEFAULT_BUNDLE_TTL = timedelta(hours=24)
MAX_REGISTRATION = timedelta(days=36525)


class ProviderForbidden(Forbidden):
    """Unknown, revoked or expired provider: one fixed message (no registry probing)."""

    public_detail = "not an active registered provider"


def trusted_issuers(settings) -> tuple[str, ...]:
    """The issuers whose tokens this deployment accepts: its own (HERO_JWT_ISSUER, when it has keys for it: dev
    mode, HERO_JWKS_FILE or HERO_JWKS_URL, or no OIDC issuer at all) and every OIDC issuer."""
    oidc = [*getattr(settings, "oidc_issuer", ()), *(c.issuer for c in getattr(settings, "oidc_issuers", ()))]
    own = settings.dev_mode or settings.jwks_file or settings.jwks_url or not oidc
    return tuple(dict.fromkeys(([settings.jwt_issuer] if own else []) + oidc))


def provider_issuer(issuer: str | None, trusted: tuple[str, ...]) -> str:
    """The issuer a registration names: one the service trusts; unnamed, the only one it trusts."""
    if issuer is None:
        if len(trusted) == 1:
            return trusted[0]
        raise InvalidInput("issuer is required: this service trusts several issuers (" + ", ".join(trusted) + ")")
    if issuer not in trusted:
        raise InvalidInput(f"issuer {issuer!r} is not one this service trusts (" + ", ".join(trusted) + ")")
    return issuer


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _aware(t: datetime | None) -> datetime | None:
    return t if t is None or t.tzinfo else t.replace(tzinfo=UTC)  # SQLite returns naive UTC


def provider_meta(row: ProviderRow) -> dict[str, object]:
    """What the registry shows: public data only."""
    import base64

    return {
        "provider_id": row.provider_id,
        "issuer": row.issuer,
        "public_key": base64.b64encode(row.public_key).decode(),
        "key_type": row.key_type,
        "status": row.status,
        "created_at": iso(row.created_at),
        "created_by": row.created_by,
        "expires_at": iso(row.expires_at),
        "revoked_at": iso(row.revoked_at),
    }


def _event(actor: Actor, action: str, detail: str, levels=(), key_version: str | None = None) -> AuditEvent:
    return AuditEvent.of(actor, action, levels, key_version, detail=detail)


def register(
    db: Database, provider_id: str, public_key: str, actor: Actor, expires_at: datetime | None = None,
    key_type: str = "x25519", *, issuer: str | None = None, trusted: tuple[str, ...],
) -> ProviderRow:
    """Register `provider_id` as the `sub` of `issuer`'s tokens (`trusted`: trusted_issuers(settings))."""
    if not PROVIDER_ID_RE.match(provider_id or ""):
        raise InvalidInput(f"provider_id must match {PROVIDER_ID_RE.pattern}")
    issuer = provider_issuer(issuer, trusted)
    try:
        raw = parse_public_key(public_key, key_type)
    except BundleError as exc:
        raise InvalidInput(str(exc)) from None
    now = _now()
    if expires_at is not None:
        try:
            expires_at = _aware(expires_at).astimezone(UTC)  # type: ignore[union-attr]
        except (OverflowError, ValueError):
            raise InvalidInput("expires_at is out of range") from None
        if not now < expires_at <= now + MAX_REGISTRATION:
            raise InvalidInput("expires_at must be in the future, within 100 years")
    try:
        with db.session() as s:
            if repo.get(s, provider_id) is not None:
                raise Conflict(f"provider {provider_id!r} is already registered")
            row = ProviderRow(provider_id=provider_id, issuer=issuer, public_key=raw, key_type=key_type,
                              status="active", created_at=now,
                              created_by=actor.subject[:256], expires_at=expires_at)
            s.add(row)
            s.flush()
            fpr = hashlib.sha256(raw).hexdigest()[:16]
            append_or_fail(s, [_event(actor, "providers.add",
                                      f"provider {provider_id} issuer {issuer} key {key_type} sha256:{fpr}")])
    except IntegrityError:
        raise Conflict(f"provider {provider_id!r} is already registered") from None
    log.info("provider registered", extra={"provider_id": provider_id})
    return row


def list_providers(db: Database) -> list[ProviderRow]:
    with db.session() as s:
        return repo.list_all(s)


def revoke(db: Database, provider_id: str, actor: Actor) -> ProviderRow:
    """Refuse every later bundle request of the provider (bundles already issued live until they expire:
    rotate the keys to cut them off, docs/providers.md)."""
    with db.session() as s:
        row = repo.get(s, provider_id, for_update=True)
        if row is None:
            raise NotFound(f"no provider {provider_id!r}")
        if row.status != "revoked":
            row.status = "revoked"
            row.revoked_at = _now()
        append_or_fail(s, [_event(actor, "providers.revoke", f"provider {provider_id}")])
    log.info("provider revoked", extra={"provider_id": provider_id})
    return row


@dataclass(frozen=True)
class BundleIssue:
    """A sealed bundle ready to send (`bundle` is ciphertext: only the provider's private key opens it)."""

    bundle: bytes
    bundle_id: str
    etag: str
    key_versions: dict[str, str]
    expires_at: datetime
    receipt: dict

    def __repr__(self) -> str:
        return f"BundleIssue(id={self.bundle_id!r}, etag={self.etag!r}, versions={self.key_versions})"


def active_provider(db: Database, actor: Actor, trusted: tuple[str, ...]) -> ProviderRow:
    """The active registered provider that `actor` (issuer, sub) is, or ProviderForbidden (one message)."""
    provider_id = actor.subject
    with db.session() as s:
        row = repo.get(s, provider_id)
    now = datetime.now(UTC)
    if row is None or row.status != "active" or (row.expires_at is not None and _aware(row.expires_at) <= now):
        raise ProviderForbidden(f"provider {provider_id!r} is unknown, revoked or expired")
    if row.issuer == "" and len(trusted) == 1 and actor.issuer in ("", trusted[0]):
        return row  # registered before issuers were recorded, on a single-issuer service: no one else's
    if row.issuer == "":
        log.warning("provider registered without an issuer refused: this service trusts several issuers; "
                    "register it again with its issuer", extra={"provider_id": provider_id, "issuer": actor.issuer})
        raise ProviderForbidden(f"provider {provider_id!r} has no issuer recorded")
    if row.issuer != actor.issuer:
        raise ProviderForbidden(f"provider {provider_id!r} is registered for another issuer")
    return row


def active_versions(store: DbKeyStore, profile: Profile) -> dict[str, str]:
    """Active version per level (metadata only: no decryption)."""
    rows = store.version_rows(profile)
    out: dict[str, str] = {}
    for lv in range(1, profile.depth + 1):
        active = [r.version for r in rows if r.level == lv and r.status == "active"]
        if not active:
            raise Conflict(f"no active key for level {lv} of profile {profile.name!r}; initialise the keys first")
        out[str(lv)] = active[-1]
    return out


def bundle_etag(provider: ProviderRow, profile: Profile, versions: dict[str, str]) -> str:
    """Stable while the provider's key and the active versions stay: a poll with it answers 304."""
    material = canonical_header({
        "provider_id": provider.provider_id, "public_key": provider.public_key.hex(),
        "profile": profile.to_dict(), "key_versions": versions,
    })
    return hashlib.sha256(material).hexdigest()[:32]


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/").strip('"') for t in if_none_match.split(",")]
    return etag in tags or "*" in tags


def issue_bundle(
    db: Database,
    store: DbKeyStore,
    profile: Profile,
    actor: Actor,
    *,
    if_none_match: str | None = None,
    signer: LogSigner,
    ttl: timedelta = DEFAULT_BUNDLE_TTL,
    interval_s: float = 0.0,
    trusted: tuple[str, ...],
) -> BundleIssue | str:
    """The sealed bundle for the provider `actor` is ((issuer, sub); `trusted`: trusted_issuers), or its ETag alone
    when `if_none_match` matches.

    Order: provider check (403 before any key is touched), ETag from metadata (304 without decrypting),
    tables derived, sealed and signed with `signer`'s key, audit event + receipt committed, then returned.
    No audit, no bundle.
    """
    provider = active_provider(db, actor, trusted)
    versions = active_versions(store, profile)
    etag = bundle_etag(provider, profile, versions)
    if etag_matches(if_none_match, etag):
        return etag
    keyset = store.active_keyset(profile)
    versions = {str(t.level): t.version for t in keyset.tables}  # what was really read (a rotation may race)
    etag = bundle_etag(provider, profile, versions)
    now = _now()
    expires_at = now + ttl
    if provider.expires_at is not None:
        expires_at = min(expires_at, _aware(provider.expires_at))  # type: ignore[type-var]
    bundle_id = uuid.uuid4().hex
    header = {
        "bundle_id": bundle_id, "provider_id": provider.provider_id, "profile": profile.to_dict(),
        "key_versions": versions, "issued_at": now.isoformat(), "expires_at": expires_at.isoformat(), "etag": etag,
    }
    sealed = seal_bundle_v3(header, keyset, provider.public_key, provider.key_type, signer.key, signer.origin)
    del keyset
    event = _event(
        actor, "keys.bundle",
        f"bundle {bundle_id} provider {provider.provider_id} profile {profile.name} etag {etag} "
        f"expires {expires_at.isoformat()}",
        levels=range(1, profile.depth + 1), key_version=",".join(versions.values())[:64],
    )
    (receipt,) = record_with_receipts(db, [event], signer, interval_s)
    log.info("generation bundle issued",
             extra={"provider_id": provider.provider_id, "bundle_id": bundle_id, "versions": versions})
    return BundleIssue(sealed, bundle_id, etag, versions, expires_at, receipt)
