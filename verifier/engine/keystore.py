"""Key store interface, and the embedded file store used before the service's encrypted DB store.

Stores keep per-level, per-version master secrets and hand out derived key tables; callers ask for
exactly the levels they may use. Version status: active (generation), verify-only, disabled,
destroyed. Only active and verify-only versions are handed to a decoder.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from verifier.engine.keys import KeySet, KeyTable, derive_level_table, new_master_secret
from verifier.engine.profile import Profile

USABLE_FOR_DECODING = ("active", "verify-only")


class KeyStoreError(RuntimeError):
    """The store cannot satisfy a request (no keys yet, unknown version...); message is user-facing."""


@dataclass(frozen=True)
class VersionInfo:
    """Metadata of one key version: never the secret."""

    level: int
    version: str
    status: str
    created_at: str

    def to_dict(self) -> dict[str, object]:
        return {"level": self.level, "version": self.version, "status": self.status, "created_at": self.created_at}


class KeyStore(Protocol):
    def initialize(self, profile: Profile) -> list[VersionInfo]: ...

    def versions(self, profile: Profile) -> list[VersionInfo]: ...

    def active_keyset(self, profile: Profile) -> KeySet: ...

    def verification_tables(self, profile: Profile, max_level: int) -> dict[int, list[KeyTable]]: ...


def hero_home() -> Path:
    return Path(os.environ.get("HERO_HOME", str(Path.home() / ".hero"))).expanduser()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class FileKeyStore:
    """Master secrets in one JSON file (mode 0600) under $HERO_HOME. For single-machine use and tests."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or hero_home() / "keys.json"

    def _load(self) -> dict:
        if not self.path.exists():
            return {}
        return json.loads(self.path.read_text())

    def _save(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".keys-")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _levels(self, profile: Profile) -> dict[str, list[dict]]:
        return self._load().get("profiles", {}).get(profile.name, {})

    def initialize(self, profile: Profile) -> list[VersionInfo]:
        data = self._load()
        profiles = data.setdefault("profiles", {})
        if profiles.get(profile.name):
            raise KeyStoreError(f"keys for profile {profile.name!r} already exist; rotate a level instead")
        profiles[profile.name] = {}
        self._save(data)
        return [self.rotate(profile, lv) for lv in range(1, profile.depth + 1)]

    def rotate(self, profile: Profile, level: int) -> VersionInfo:
        if not 1 <= level <= profile.depth:
            raise KeyStoreError(f"level must be in 1..{profile.depth}")
        data = self._load()
        levels = data.setdefault("profiles", {}).setdefault(profile.name, {})
        rows = levels.setdefault(str(level), [])
        for r in rows:
            if r["status"] == "active":
                r["status"] = "verify-only"
        row = {
            "version": f"l{level}-v{len(rows) + 1}",
            "status": "active",
            "created_at": _now(),
            "secret": base64.b64encode(new_master_secret()).decode(),
        }
        rows.append(row)
        self._save(data)
        return VersionInfo(level, row["version"], row["status"], row["created_at"])

    def versions(self, profile: Profile) -> list[VersionInfo]:
        return [
            VersionInfo(int(lv), r["version"], r["status"], r["created_at"])
            for lv, rows in sorted(self._levels(profile).items())
            for r in rows
        ]

    def _table(self, profile: Profile, level: int, row: dict) -> KeyTable:
        secret = base64.b64decode(row["secret"])
        return derive_level_table(secret, profile, level, row["version"])

    def active_keyset(self, profile: Profile) -> KeySet:
        levels = self._levels(profile)
        tables = []
        for lv in range(1, profile.depth + 1):
            active = [r for r in levels.get(str(lv), []) if r["status"] == "active"]
            if not active:
                raise KeyStoreError(f"no active key for level {lv} of profile {profile.name!r}; run 'hero keys init'")
            tables.append(self._table(profile, lv, active[-1]))
        return KeySet(tuple(tables))

    def verification_tables(self, profile: Profile, max_level: int) -> dict[int, list[KeyTable]]:
        levels = self._levels(profile)
        out: dict[int, list[KeyTable]] = {}
        for lv in range(1, min(max_level, profile.depth) + 1):
            rows = [r for r in levels.get(str(lv), []) if r["status"] in USABLE_FOR_DECODING]
            if rows:
                out[lv] = [self._table(profile, lv, r) for r in rows]
        if 1 not in out:
            raise KeyStoreError(f"no level-1 keys for profile {profile.name!r}; run 'hero keys init'")
        return out
