"""Decrypted verification material kept in memory, per profile and level, checked against the key epoch.

Decrypting the key rows and re-deriving a 4096-entry spec v2 table costs ~30 ms; doing it per request
caps the service far below the kernel. `MaterialCache.get(profile, level)` reads the profile's key
epoch (one indexed row, `hero_key_epochs`) and reuses the entry made at that epoch; every key change
(init, rotate, disable, enable, destroy) bumps the epoch in its own transaction, so the next call in any
process sees it. Entries are per granted level: a moderator's entry (level 1) is built from level-1 rows only
and never shares an object with an auditor's, so least privilege holds as without the cache.

Key material never appears in a repr, a log line or an exception; `clear()` drops it (shutdown).
Key rows edited by hand in SQL, bypassing the store, are seen only after the next epoch bump (or a restart).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifier.engine.profile import Profile
from verifier.keys import repository as repo
from verifier.keys.decodable import VerificationMaterial
from verifier.keys.service import DbKeyStore

Prepare = Callable[[Profile, VerificationMaterial], Any]


@dataclass(frozen=True, repr=False)
class CachedMaterial:
    """Material of levels 1..level at one key epoch, plus what `prepare` made of it (e.g. a decoder) and what
    the runner made of it for other devices or alphas (`variants`, dropped with the entry)."""

    epoch: int
    level: int
    material: VerificationMaterial
    prepared: Any = None
    variants: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"CachedMaterial(epoch={self.epoch}, level={self.level})"

    __str__ = __repr__


class MaterialCache:
    """Thread-safe; one per process (API context or worker). `prepare` runs once per entry."""

    def __init__(self, store: DbKeyStore, prepare: Prepare | None = None) -> None:
        self.store = store
        self.prepare = prepare
        self._entries: dict[tuple[str, int], CachedMaterial] = {}
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # one derivation at a time: a burst after a rotation derives once

    def __repr__(self) -> str:
        return f"MaterialCache(entries={len(self._entries)})"

    __str__ = __repr__

    def epoch(self, profile: Profile) -> int:
        return repo.current_epoch(self.store.db, profile.name)

    def get(self, profile: Profile, level: int) -> CachedMaterial:
        """Material of levels 1..level (a granted level), current as of the epoch read now."""
        key = (profile.name, level)
        epoch = self.epoch(profile)
        hit = self._entries.get(key)
        if hit is not None and hit.epoch == epoch:
            return hit
        with self._build_lock:
            hit = self._entries.get(key)
            if hit is not None and hit.epoch == epoch:
                return hit
            # Rows are read after the epoch: the material is at least as new as `epoch` (a change committed
            # in between bumps the epoch again, so the next call rebuilds).
            material = self.store.verification_material(profile, level)
            prepared = self.prepare(profile, material) if self.prepare is not None else None
            entry = CachedMaterial(epoch, level, material, prepared)
            with self._lock:
                cur = self._entries.get(key)
                if cur is None or cur.epoch <= epoch:
                    self._entries[key] = entry
            return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
