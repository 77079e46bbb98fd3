"""DbKeyStore: the engine's KeyStore protocol over envelope-encrypted rows in the service database.

Only master secrets (32 bytes) are stored, sealed with AES-GCM under a per-row data key that the KEK
provider wraps; key tables are re-derived with `derive_level_table` after decryption. Decryption is limited
to the levels a caller may use (`verification_material(profile, max_level)` never reads higher rows).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError

from verifier.db import Database
from verifier.engine.keys import MASTER_SECRET_BYTES, KeySet, KeyTable, derive_level_table, new_master_secret
from verifier.engine.keystore import USABLE_FOR_DECODING, KeyStoreError, VersionInfo
from verifier.engine.profile import Profile
from verifier.keys import repository as repo
from verifier.keys.crypto import Sealed, associated_data, open_sealed, rewrap, seal
from verifier.keys.kek import KekError, KekProvider
from verifier.keys.models import KeyVersionRow

log = logging.getLogger("hero.keys")

STATUSES = ("active", "verify-only", "disabled", "destroyed")


class KeyNotFound(KeyStoreError):
    pass


class KeyConflict(KeyStoreError):
    pass


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="seconds")


def version_meta(row: KeyVersionRow) -> dict[str, object]:
    """Metadata of a row (never ciphertext or key material)."""
    return {
        "profile": row.profile,
        "level": row.level,
        "version": row.version,
        "status": row.status,
        "created_at": _iso(row.created_at),
        "status_changed_at": _iso(row.status_changed_at),
        "destroyed_at": _iso(row.destroyed_at),
        "kek_id": row.kek_id,
    }


def _info(row: KeyVersionRow) -> VersionInfo:
    return VersionInfo(row.level, row.version, row.status, _iso(row.created_at) or "")


@dataclass(repr=False)
class VerificationMaterial:
    """Key tables for levels 1..n (no gaps) plus reasons for versions that can no longer decode."""

    tables: dict[int, list[KeyTable]]
    unavailable: dict[int, str]  # level -> reason (some versions destroyed/disabled)
    missing: dict[int, str]  # level -> reason (no usable version at all: level not decodable)

    def __repr__(self) -> str:
        return f"VerificationMaterial(levels={sorted(self.tables)}, missing={sorted(self.missing)})"


class DbKeyStore:
    """KeyStore backed by the service DB; safe to share between threads."""

    def __init__(self, db: Database, kek: KekProvider) -> None:
        self.db = db
        self.kek = kek

    def __repr__(self) -> str:
        return f"DbKeyStore({self.db.dialect})"

    # -- secrets -------------------------------------------------------------------------------
    def _seal_new(self, profile: Profile, level: int, version: str) -> Sealed:
        return seal(self.kek, new_master_secret(), associated_data(profile.name, level, version))

    def _open(self, row: KeyVersionRow) -> bytes:
        if row.ciphertext is None or row.wrapped_dek is None or row.nonce is None or row.kek_id is None:
            raise KeyStoreError(f"key version {row.version} has no key material (status {row.status})")
        sealed = Sealed(row.kek_id, row.wrapped_dek, row.nonce, row.ciphertext)
        secret = open_sealed(self.kek, sealed, associated_data(row.profile, row.level, row.version))
        if len(secret) != MASTER_SECRET_BYTES:
            raise KekError("decrypted key has the wrong length")
        return secret

    def _table(self, profile: Profile, row: KeyVersionRow) -> KeyTable:
        if not 1 <= row.level <= profile.depth:
            raise KeyStoreError(f"key version {row.version} is for a level the profile does not have")
        return derive_level_table(self._open(row), profile, row.level, row.version)

    # -- KeyStore protocol ---------------------------------------------------------------------
    def initialize(self, profile: Profile) -> list[VersionInfo]:
        with self.db.session() as s:
            if repo.count_profile(s, profile.name):
                raise KeyConflict(f"keys for profile {profile.name!r} already exist; rotate a level instead")
        return [self.rotate(profile, lv) for lv in range(1, profile.depth + 1)]

    def rotate(self, profile: Profile, level: int) -> VersionInfo:
        return _info(self.rotate_row(profile, level))

    def rotate_row(self, profile: Profile, level: int) -> KeyVersionRow:
        if not 1 <= level <= profile.depth:
            raise KeyNotFound(f"level must be in 1..{profile.depth}")
        for _attempt in range(5):
            try:
                with self.db.session() as s:
                    rows = repo.level_rows(s, profile.name, level, for_update=True)
                    now = _now()
                    for r in rows:
                        if r.status == "active":
                            r.status = "verify-only"
                            r.status_changed_at = now
                    seq = repo.next_seq(s, profile.name, level)
                    version = f"l{level}-v{seq}"
                    sealed = self._seal_new(profile, level, version)
                    row = KeyVersionRow(
                        profile=profile.name,
                        level=level,
                        seq=seq,
                        version=version,
                        status="active",
                        kek_id=sealed.kek_id,
                        wrapped_dek=sealed.wrapped_dek,
                        nonce=sealed.nonce,
                        ciphertext=sealed.ciphertext,
                        created_at=now,
                        status_changed_at=now,
                    )
                    s.add(row)
                    s.flush()
                log.info("key rotated", extra={"profile": profile.name, "level": level, "version": version})
                return row
            except IntegrityError:  # a concurrent rotation took this sequence number
                continue
        raise KeyConflict("concurrent rotations of this level; retry")

    def versions(self, profile: Profile) -> list[VersionInfo]:
        return [_info(r) for r in self.version_rows(profile)]

    def version_rows(self, profile: Profile) -> list[KeyVersionRow]:
        with self.db.session() as s:
            return repo.list_versions(s, profile.name)

    def active_keyset(self, profile: Profile) -> KeySet:
        with self.db.session() as s:
            rows = repo.list_versions(s, profile.name)
        tables = []
        for lv in range(1, profile.depth + 1):
            active = [r for r in rows if r.level == lv and r.status == "active"]
            if not active:
                raise KeyStoreError(f"no active key for level {lv} of profile {profile.name!r}; run 'hero keys init'")
            tables.append(self._table(profile, active[-1]))
        return KeySet(tuple(tables))

    def verification_tables(self, profile: Profile, max_level: int) -> dict[int, list[KeyTable]]:
        mat = self.verification_material(profile, max_level)
        if 1 not in mat.tables:
            raise KeyStoreError(f"no level-1 keys for profile {profile.name!r}; run 'hero keys init'")
        return mat.tables

    # -- service extensions --------------------------------------------------------------------
    def verification_material(self, profile: Profile, max_level: int) -> VerificationMaterial:
        """Decrypts only versions of levels 1..min(max_level, depth) that may decode."""
        top = max(0, min(int(max_level), profile.depth))
        with self.db.session() as s:
            rows = repo.list_versions(s, profile.name, max_level=top)
        if top >= 1 and not any(r.level == 1 for r in rows):
            raise KeyStoreError(
                f"no keys for profile {profile.name!r} yet; run 'hero keys init' or POST /v1/keys/init"
            )
        tables: dict[int, list[KeyTable]] = {}
        unavailable: dict[int, str] = {}
        missing: dict[int, str] = {}
        for lv in range(1, top + 1):
            lrows = [r for r in rows if r.level == lv]
            gone = [r for r in lrows if r.status in ("destroyed", "disabled")]
            reason = _gone_reason(gone)
            usable = [r for r in lrows if r.status in USABLE_FOR_DECODING]
            if missing or not usable:  # the decoder needs levels 1..n without gaps
                missing[lv] = reason or (
                    f"no usable key for level {lv}" if not missing else f"level {min(missing)} cannot be decoded"
                )
                continue
            tables[lv] = [self._table(profile, r) for r in usable]
            if reason:
                unavailable[lv] = reason
        return VerificationMaterial(tables, unavailable, missing)

    def set_status(self, profile: Profile, level: int, version: str, status: str) -> KeyVersionRow:
        if status not in ("verify-only", "disabled"):
            raise KeyStoreError(f"cannot set status {status!r} directly")
        with self.db.session() as s:
            row = self._get(s, profile, level, version)
            if row.status == "destroyed":
                raise KeyConflict(f"{version} is destroyed")
            if row.status == "active":
                raise KeyConflict(f"{version} is the active version of level {level}; rotate the level first")
            if row.status != status:
                row.status = status
                row.status_changed_at = _now()
            return row

    def disable(self, profile: Profile, level: int, version: str) -> KeyVersionRow:
        return self.set_status(profile, level, version, "disabled")

    def enable(self, profile: Profile, level: int, version: str) -> KeyVersionRow:
        return self.set_status(profile, level, version, "verify-only")

    def destroy(self, profile: Profile, level: int, version: str, *, confirm: str | None) -> KeyVersionRow:
        """Irreversibly drop the key material of one version. `confirm` must repeat the version id."""
        if confirm != version:
            raise KeyStoreError(f"destroying {version} is irreversible: confirm by repeating the version id")
        with self.db.session() as s:
            row = self._get(s, profile, level, version)
            if row.status == "active":
                raise KeyConflict(f"{version} is the active version of level {level}; rotate the level first")
            if row.status != "destroyed":
                now = _now()
                row.ciphertext = None
                row.wrapped_dek = None
                row.nonce = None
                row.kek_id = None
                row.status = "destroyed"
                row.status_changed_at = now
                row.destroyed_at = now
        log.info("key destroyed", extra={"profile": profile.name, "level": level, "version": version})
        return row

    def rewrap_all(self) -> int:
        """Re-wrap every row's data key under the KEK provider's current KEK. Key tables do not change."""
        n = 0
        with self.db.session() as s:
            current = self.kek.current_id()
            for row in repo.all_sealed(s):
                if row.kek_id == current:
                    continue
                assert row.kek_id and row.wrapped_dek and row.nonce and row.ciphertext
                aad = associated_data(row.profile, row.level, row.version)
                new = rewrap(self.kek, Sealed(row.kek_id, row.wrapped_dek, row.nonce, row.ciphertext), aad)
                row.kek_id, row.wrapped_dek = new.kek_id, new.wrapped_dek
                n += 1
        return n

    def _get(self, s, profile: Profile, level: int, version: str) -> KeyVersionRow:
        row = repo.get_version(s, profile.name, version, for_update=True)
        if row is None or row.level != level:
            raise KeyNotFound(f"no key version {version!r} at level {level} of profile {profile.name!r}")
        return row


def _gone_reason(rows: list[KeyVersionRow]) -> str | None:
    parts = []
    destroyed = [r for r in rows if r.status == "destroyed"]
    disabled = [r for r in rows if r.status == "disabled"]
    if destroyed:
        parts.append(
            "key version(s) "
            + ", ".join(f"{r.version} destroyed on {_iso(r.destroyed_at)}" for r in destroyed)
            + "; text made with them can no longer be decoded"
        )
    if disabled:
        parts.append(
            "key version(s) " + ", ".join(r.version for r in disabled) + " disabled; text made with them is not decoded"
        )
    return "; ".join(parts) or None
