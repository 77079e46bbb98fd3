"""The hash chain's definition: which fields an event hashes, and how (shared by appends, checks and the
transparency log, whose leaf data is the same canonical JSON)."""

from __future__ import annotations

import hashlib

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


def row_fields(row: AuditEventRow) -> dict[str, object]:
    return {k: getattr(row, k) for k in HASHED_FIELDS}


def compute_hash(prev_hash: str, fields: dict[str, object]) -> str:
    return hashlib.sha256(prev_hash.encode() + b"\n" + canonical(fields)).hexdigest()
