"""Per-level key tables derived from per-level, per-version master secrets (spec section 3).

A master secret is 32 bytes from the OS CSPRNG. Entry a of level l's table and the position key are
128-bit SipHash keys derived with HKDF-SHA256, so a table of 2^b_l independent-looking secrets is
rebuilt on demand from one stored secret. Objects holding key bytes never print them.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MASTER_SECRET_BYTES = 32
KEY_BYTES = 16
HKDF_SALT = b"HeRo-watermark-v1"


def new_master_secret() -> bytes:
    return secrets.token_bytes(MASTER_SECRET_BYTES)


def _hkdf(master: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=HKDF_SALT, info=info).derive(master)


def entry_key(master: bytes, level: int, value: int) -> bytes:
    """K^(l)(a): info = 'hero/v1/table' || u8(level) || u32be(value)."""
    return _hkdf(master, b"hero/v1/table" + struct.pack(">BI", level, value))


def position_key(master_level1: bytes) -> bytes:
    """K_pos, derived from the level-1 master (every verifier needs it)."""
    return _hkdf(master_level1, b"hero/v1/position")


@dataclass(frozen=True, repr=False)
class KeyTable:
    """One level's key table at one version: 2^bits SipHash keys (+ the position key at level 1)."""

    level: int
    version: str
    entries: tuple[bytes, ...]
    position: bytes | None = None

    def __repr__(self) -> str:  # never show key bytes
        return f"KeyTable(level={self.level}, version={self.version!r}, entries={len(self.entries)})"

    __str__ = __repr__


def derive_table(master: bytes, level: int, bits: int, version: str) -> KeyTable:
    if len(master) != MASTER_SECRET_BYTES:
        raise ValueError("master secret has the wrong length")
    entries = tuple(entry_key(master, level, a) for a in range(1 << bits))
    return KeyTable(level, version, entries, position_key(master) if level == 1 else None)


@dataclass(frozen=True, repr=False)
class KeySet:
    """Key tables for levels 1..n at one version each: what generation uses and a decoder tries."""

    tables: tuple[KeyTable, ...] = field(default_factory=tuple)

    def __repr__(self) -> str:
        return f"KeySet({', '.join(f'L{t.level}={t.version}' for t in self.tables)})"

    __str__ = __repr__

    @property
    def levels(self) -> int:
        return len(self.tables)

    @property
    def position(self) -> bytes:
        pos = self.tables[0].position
        if pos is None:
            raise ValueError("key set has no level-1 table")
        return pos
