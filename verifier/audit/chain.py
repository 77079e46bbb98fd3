"""The hash chain's definition: which fields an event hashes, and how (shared by appends, checks and the
transparency log, whose leaf data is the same canonical JSON)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from verifier.audit.models import AuditEventRow
from verifier.audit.transparency import canonical

GENESIS = "0" * 64
HASHED_FIELDS = (
    "idx",
    "created_at",
    "action",
    "subject",
    "role",
    "jti",
    "levels",
    "key_version",
    "text_sha256",
    "outcome",
    "detail",
)


@dataclass(slots=True)
class AppendedEvent:
    """An event row as the append path builds it: the columns of AuditEventRow, without the ORM's instance
    bookkeeping (rows are inserted with one Core executemany and never attached to a session; building and
    reading instrumented ORM objects cost ~40 % of a group commit's CPU)."""

    idx: int
    created_at: str
    action: str
    subject: str
    role: str
    jti: str
    levels: str
    key_version: str | None
    text_sha256: str | None
    outcome: str
    detail: str | None
    prev_hash: str
    hash: str
    leaf_data: bytes | None = field(default=None, repr=False)  # canonical(row_fields): hashed twice, built once


def row_fields(row: AuditEventRow | AppendedEvent) -> dict[str, object]:
    return {k: getattr(row, k) for k in HASHED_FIELDS}


def compute_hash(prev_hash: str, fields: dict[str, object]) -> str:
    return hash_canonical(prev_hash, canonical(fields))


def hash_canonical(prev_hash: str, data: bytes) -> str:
    """`compute_hash` given the canonical JSON of the fields already (the append path also hashes it as a leaf)."""
    return hashlib.sha256(prev_hash.encode() + b"\n" + data).hexdigest()
