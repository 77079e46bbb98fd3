"""DbKeyStore: watermark keys as envelope-encrypted rows in the service database.

Only master secrets (32 bytes) are stored, sealed with AES-GCM under a per-row data key that the KEK
provider wraps; key tables are re-derived with `derive_level_table` after decryption. Decryption is limited
to the levels a caller may use (`verification_material(profile, level)` never reads higher rows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from verifier.audit.service import Actor, AuditEvent, append_or_fail
from verifier.base.db import Database
from verifier.engine.keys import MASTER_SECRET_BYTES, KeySet, KeyTable, derive_level_table, new_master_secret
from verifier.engine.profile import Profile, profile_digest
from verifier.keys import repository as repo
from verifier.keys.crypto import Sealed, associated_data, open_sealed, rewrap, seal
from verifier.keys.decodable import VerificationMaterial, decodable_versions, iso
from verifier.keys.errors import (
    KeyConfirmationMissing,
    KeyConflict,
    KeyNotFound,
    KeyStoreError,
    KeyTokenizerMismatch,
)
from verifier.keys.kek import KekError, KekProvider
from verifier.keys.models import KeyVersionRow

log = logging.getLogger("hero.keys")

STATUSES = ("active", "verify-only", "disabled", "destroyed")

# (store, actor) -> summary. Re-wraps every data key the service holds (key rows and jobs: hence a hook the
# composition root supplies, verifier.jobs.kek_rotation.rotate_kek) under a new KEK and retires the old ones.
Rekey = Callable[["DbKeyStore", "Actor | None"], object]
# profile -> the fingerprint of its tokenizer as parsed, None for a built-in (verifier.lm.key_time_fingerprint,
# supplied by the composition root: the key layer does not read tokenizers).
Fingerprint = Callable[[Profile], "str | None"]


@dataclass(frozen=True)
class VersionInfo:
    """Metadata of one key version (what `hero keys` prints): never the secret."""

    level: int
    version: str
    status: str
    created_at: str
    tokenizer_fingerprint: str | None = None  # key-time pins (None: a built-in tokenizer, or made before 0011)
    profile_digest: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"level": self.level, "version": self.version, "status": self.status, "created_at": self.created_at,
                "tokenizer_fingerprint": self.tokenizer_fingerprint, "profile_digest": self.profile_digest}


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)




def version_meta(row: KeyVersionRow) -> dict[str, object]:
    """Metadata of a row (never ciphertext or key material)."""
    return {
        "profile": row.profile,
        "level": row.level,
        "version": row.version,
        "status": row.status,
        "created_at": iso(row.created_at),
        "status_changed_at": iso(row.status_changed_at),
        "destroyed_at": iso(row.destroyed_at),
        "kek_id": row.kek_id,
        "tokenizer_fingerprint": row.tokenizer_fingerprint,
        "profile_digest": row.profile_digest,
    }


def _info(row: KeyVersionRow) -> VersionInfo:
    return VersionInfo(row.level, row.version, row.status, iso(row.created_at) or "", row.tokenizer_fingerprint,
                       row.profile_digest)


class DbKeyStore:
    """Per-level, per-version master secrets; hands out derived key tables. Safe to share between threads.

    Version status: active (generation), verify-only, disabled, destroyed; only active and verify-only
    versions reach a decoder. Administration methods take the acting `Actor`: the change and its audit
    event then commit together (no change without its audit record).
    """

    def __init__(self, db: Database, kek: KekProvider, *, rekey: Rekey | None = None,
                 fingerprint: Fingerprint | None = None) -> None:
        self.db = db
        self.kek = kek
        self.rekey = rekey  # destroy's second half: new KEK, every data key re-wrapped, old KEKs retired
        self.fingerprint = fingerprint  # key-time pinning: recorded on every version made, checked when decoding

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

    # -- administration (each change and its audit event commit in one transaction) -------------
    def _audit(self, s: Session, actor: Actor | None, action: str, level: int | None, version: str | None) -> None:
        if actor is not None:
            event = AuditEvent.of(actor, action, [level] if level else [], version)
            append_or_fail(s, [event])

    # -- key-time pins: the tokenizer (and profile) every version is made with --------------------
    def _tokenizer_now(self, profile: Profile) -> str | None:
        return self.fingerprint(profile) if self.fingerprint is not None else None

    def _check_tokenizer(self, profile: Profile, rows: list[KeyVersionRow], now: str | None = None,
                         *, computed: bool = False) -> None:
        """Refuse, in one line naming both fingerprints, a profile whose tokenizer is not the one the key store
        recorded when these versions were made (versions from before migration 0011 recorded none)."""
        pins = sorted({r.tokenizer_fingerprint for r in rows if r.tokenizer_fingerprint})
        if not pins or self.fingerprint is None:
            return
        if not computed:
            now = self._tokenizer_now(profile)
        for want in pins:
            if now != want:
                raise KeyTokenizerMismatch(
                    f"profile {profile.name!r}: tokenizer {profile.tokenizer!r} has fingerprint "
                    f"{now or 'none (a built-in)'}, the keys were made with tokenizer fingerprint {want}; refusing "
                    "a different tokenizer (restore the one the keys were made with, or pin its revision)")

    def check_tokenizer(self, profile: Profile) -> None:
        """The startup check of a process that decodes: the profile's tokenizer is the one its keys were made with."""
        with self.db.session() as s:
            rows = repo.list_versions(s, profile.name)
        self._check_tokenizer(profile, rows)

    def _add_version(self, s: Session, profile: Profile, level: int, now: datetime,
                     tokenizer: str | None = None) -> KeyVersionRow:
        for r in repo.level_rows(s, profile.name, level, for_update=True):
            if r.status == "active":
                r.status = "verify-only"
                r.status_changed_at = now
        seq = repo.next_seq(s, profile.name, level)
        version = f"l{level}-v{seq}"
        sealed = self._seal_new(profile, level, version)
        row = KeyVersionRow(
            profile=profile.name, level=level, seq=seq, version=version, status="active",
            kek_id=sealed.kek_id, wrapped_dek=sealed.wrapped_dek, nonce=sealed.nonce, ciphertext=sealed.ciphertext,
            created_at=now, status_changed_at=now, tokenizer_fingerprint=tokenizer,
            profile_digest=profile_digest(profile),
        )
        s.add(row)
        s.flush()
        repo.bump_epoch(s, profile.name)
        return row

    def initialize_rows(self, profile: Profile, actor: Actor | None = None) -> list[KeyVersionRow]:
        """Version 1 of every level that has no version yet (also completes a half-initialised store), each
        recording the profile's tokenizer fingerprint and digest."""
        tokenizer = self._tokenizer_now(profile)  # before the transaction: parsing a tokenizer takes seconds
        try:
            with self.db.session() as s:
                existing = repo.list_versions(s, profile.name)
                have = {r.level for r in existing}
                todo = [lv for lv in range(1, profile.depth + 1) if lv not in have]
                if not todo:
                    raise KeyConflict(f"keys for profile {profile.name!r} already exist; rotate a level instead")
                self._check_tokenizer(profile, existing, tokenizer, computed=True)
                now = _now()
                rows = [self._add_version(s, profile, lv, now, tokenizer) for lv in todo]
                self._audit(s, actor, "keys.init", None, None)
        except IntegrityError:  # a concurrent initialisation won
            raise KeyConflict(f"keys for profile {profile.name!r} already exist; rotate a level instead") from None
        log.info("keys initialised", extra={"profile": profile.name})
        return rows

    def use_profile(self, profile: Profile, actor: Actor | None = None) -> tuple[list[KeyVersionRow], str | None]:
        """`hero profile use NAME`: the deployment serves `profile` from now on, in one audited transaction: keys
        for every level it lacks (`keys.init`, as `initialize_rows`), then the choice recorded in the database
        (`keys.use_profile`, detail `before -> NAME`), which every process reads (verifier/keys/deployment.py).
        Keys of the profiles served before stay: their texts keep decoding. Returns (versions made, the profile
        recorded before)."""
        from verifier.keys.deployment import record_profile

        tokenizer = self._tokenizer_now(profile)
        try:
            with self.db.session() as s:
                existing = repo.list_versions(s, profile.name)
                self._check_tokenizer(profile, existing, tokenizer, computed=True)
                have = {r.level for r in existing}
                todo = [lv for lv in range(1, profile.depth + 1) if lv not in have]
                now = _now()
                rows = [self._add_version(s, profile, lv, now, tokenizer) for lv in todo]
                if rows:
                    self._audit(s, actor, "keys.init", None, None)
                before = record_profile(s, profile.name)
                if actor is not None:
                    append_or_fail(s, [AuditEvent.of(actor, "keys.use_profile",
                                                     detail=f"{before or '-'} -> {profile.name}")])
        except IntegrityError:  # a concurrent `use` or init of the same profile won: its keys stand
            raise KeyConflict(f"keys for profile {profile.name!r} were being made concurrently; retry") from None
        log.info("deployment profile recorded", extra={"profile": profile.name})
        return rows, before

    def record_issue(self, profile: str, detail: str, actor: Actor | None = None) -> None:
        """Values issued at a level of the deployment's profile `profile` (its file was just appended to:
        verifier/keys/issued.py): audited (`keys.issue`), and the profile's key epoch bumped, so every process's
        cached decoder of it is rebuilt on the profile as it reads now (the keys themselves do not change)."""
        with self.db.session() as s:
            repo.bump_epoch(s, profile)
            if actor is not None:
                append_or_fail(s, [AuditEvent.of(actor, "keys.issue", detail=detail)])

    def initialize(self, profile: Profile, actor: Actor | None = None) -> list[VersionInfo]:
        return [_info(r) for r in self.initialize_rows(profile, actor)]

    def rotate(self, profile: Profile, level: int, actor: Actor | None = None) -> VersionInfo:
        return _info(self.rotate_row(profile, level, actor))

    def rotate_row(
        self, profile: Profile, level: int, actor: Actor | None = None, *, allow_empty: bool = False
    ) -> KeyVersionRow:
        """New active version of `level`. Refused on a profile without keys: `init` creates every level."""
        if not 1 <= level <= profile.depth:
            raise KeyNotFound(f"level must be in 1..{profile.depth}")
        tokenizer = self._tokenizer_now(profile)
        for _attempt in range(5):
            try:
                with self.db.session() as s:
                    if not allow_empty and not repo.count_profile(s, profile.name):
                        raise KeyConflict(
                            f"no keys for profile {profile.name!r} yet; run 'hero keys init' (POST /v1/keys/init) "
                            "to create every level"
                        )
                    self._check_tokenizer(profile, repo.list_versions(s, profile.name), tokenizer, computed=True)
                    row = self._add_version(s, profile, level, _now(), tokenizer)
                    self._audit(s, actor, "keys.rotate", level, row.version)
                log.info("key rotated", extra={"profile": profile.name, "level": level, "version": row.version})
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

    # -- decoding --------------------------------------------------------------------------------
    def verification_material(self, profile: Profile, level: int) -> VerificationMaterial:
        """Decrypts only versions of levels 1..level (a granted level) that may decode."""
        if not 1 <= level <= profile.depth:
            raise ValueError(f"level {level} outside 1..{profile.depth} (grant levels with Policy.grant)")
        with self.db.session() as s:
            rows = repo.list_versions(s, profile.name, max_level=level)
        if not any(r.level == 1 for r in rows):
            raise KeyStoreError(
                f"no keys for profile {profile.name!r} yet; run 'hero keys init' or POST /v1/keys/init"
            )
        self._check_tokenizer(profile, rows)  # once per key epoch and level (MaterialCache), memoised per file
        plan = decodable_versions(rows, level)
        tables = {lv: [self._table(profile, r) for r in usable] for lv, usable in plan.usable.items()}
        return VerificationMaterial(tables, plan.unavailable, plan.missing, plan.not_tried)

    def disable(self, profile: Profile, level: int, version: str, actor: Actor | None = None) -> KeyVersionRow:
        """Stop decoding with a (non-active) version; its key material stays."""
        with self.db.session() as s:
            row = self._get(s, profile, level, version)
            if row.status == "destroyed":
                raise KeyConflict(f"{version} is destroyed")
            if row.status == "active":
                raise KeyConflict(f"{version} is the active version of level {level}; rotate the level first")
            if row.status != "disabled":
                row.status = "disabled"
                row.status_changed_at = _now()
                repo.bump_epoch(s, profile.name)
            self._audit(s, actor, "keys.disable", level, version)
            return row

    def enable(self, profile: Profile, level: int, version: str, actor: Actor | None = None) -> KeyVersionRow:
        """Undo `disable`: the version decodes again (verify-only). Destroyed versions cannot come back."""
        with self.db.session() as s:
            row = self._get(s, profile, level, version)
            if row.status == "destroyed":
                raise KeyConflict(f"{version} is destroyed; it cannot be enabled")
            if row.status == "disabled":
                row.status = "verify-only"
                row.status_changed_at = _now()
                repo.bump_epoch(s, profile.name)
            self._audit(s, actor, "keys.enable", level, version)
            return row

    def destroy(
        self, profile: Profile, level: int, version: str, *, confirm: str | None, actor: Actor | None = None
    ) -> KeyVersionRow:
        """Irreversibly drop the key material of one version. `confirm` must repeat the version id.

        Nulling the row is not enough where the database keeps old copies it cannot erase (PostgreSQL's live
        pg_wal, WAL archives, backups): those copies hold the row's data key wrapped by a KEK. So the same
        operation then re-keys (`rekey`): a new KEK, every remaining data key re-wrapped under it, every older
        KEK destroyed, and any surviving copy of the destroyed row stays sealed for good. Repeating a destroy
        of a destroyed version repeats the re-key (completing one that was interrupted)."""
        if confirm != version:
            raise KeyConfirmationMissing(f"destroying {version} is irreversible: confirm by repeating the version id")
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
                repo.bump_epoch(s, profile.name)
            self._audit(s, actor, "keys.destroy", level, version)
        if not self.db.purge_deleted(KeyVersionRow.__tablename__):
            log.warning("old copies of a destroyed key may remain until the next checkpoint (readers busy)",
                        extra={"version": version})
        if self.rekey is not None and hasattr(self.kek, "rotate"):
            self.rekey(self, actor)
        else:
            log.warning("KEK not rotated after a destroy: copies of the row outside the table stay decryptable "
                        "until 'hero kek rotate --retire-old'", extra={"version": version})
        log.info("key destroyed", extra={"profile": profile.name, "level": level, "version": version})
        return row

    def rewrap_all(self, actor: Actor | None = None, new_kek: str | None = None) -> int:
        """Re-wrap every row's data key under the KEK provider's current KEK. Key tables do not change.

        With an actor, the rotation is audited (`kek.rotate`, detail = the new KEK id) in the same transaction.
        """
        n = 0
        with self.db.session() as s:
            if actor is not None:
                detail = f"new KEK {new_kek or self.kek.current_id()}"
                append_or_fail(s, [AuditEvent.of(actor, "kek.rotate", detail=detail)])
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

    def move_profile(self, source: str, target: Profile, actor: Actor | None = None) -> list[KeyVersionRow]:
        """Relabel every key version of profile `source` as `target`, in one audited transaction.

        The upgrade to spec v2 needs it: keys made while `default` named the v1 profile belong to `v1` now, so
        texts made with them keep decoding (`--profile v1`) and `default` gets fresh v2 keys. Each secret is
        re-sealed under the new name, because the key AEAD binds the profile name; destroyed versions move as
        metadata. Refused when the target already has keys or lacks one of the source's levels.
        """
        if source == target.name:
            raise KeyConflict("source and target profile are the same")
        with self.db.session() as s:
            if repo.count_profile(s, target.name):
                raise KeyConflict(f"profile {target.name!r} already has keys; refusing to merge two key histories")
            rows = repo.list_versions(s, source)
            if not rows:
                raise KeyNotFound(f"no keys for profile {source!r}")
            if any(not 1 <= r.level <= target.depth for r in rows):
                raise KeyConflict(f"profile {target.name!r} has {target.depth} levels; {source!r} has keys deeper")
            for row in rows:
                if row.ciphertext is not None:
                    sealed = seal(self.kek, self._open(row), associated_data(target.name, row.level, row.version))
                    row.kek_id, row.wrapped_dek, row.nonce, row.ciphertext = (
                        sealed.kek_id, sealed.wrapped_dek, sealed.nonce, sealed.ciphertext)
                row.profile = target.name
            if actor is not None:
                append_or_fail(s, [AuditEvent.of(actor, "keys.move_profile", detail=f"{source} -> {target.name}")])
        log.info("key profile moved", extra={"profile": target.name, "source": source})
        return rows

    def _get(self, s, profile: Profile, level: int, version: str) -> KeyVersionRow:
        row = repo.get_version(s, profile.name, version, for_update=True)
        if row is None or row.level != level:
            raise KeyNotFound(f"no key version {version!r} at level {level} of profile {profile.name!r}")
        return row
