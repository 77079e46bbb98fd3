"""Hash-chained audit log.

Event i (1-based, contiguous) stores prev_hash = hash of event i-1 (64 zeros for event 1) and
hash = SHA-256(prev_hash_hex || "\\n" || canonical JSON of its fields, idx included). Editing a row
breaks its own hash; deleting one breaks the index sequence; reordering breaks prev_hash/idx. The
verifier reports the first index at which the stored chain stops matching.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from verifier.audit import repository as repo
from verifier.audit.models import AuditEventRow
from verifier.db import Database
from verifier.errors import Unavailable

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


class AuditUnavailable(Unavailable):
    """The audit log could not be written: the caller must not release the result or keep the change."""

    public_detail = "audit log unavailable; nothing was released or changed"


@dataclass(frozen=True)
class Actor:
    """Who an audited action is for: the token's subject, role and token id."""

    subject: str
    role: str
    jti: str


@dataclass
class AuditEvent:
    action: str
    subject: str
    role: str
    jti: str
    levels: Sequence[int] = field(default_factory=tuple)
    key_version: str | None = None
    text_sha256: str | None = None
    outcome: str = "ok"
    detail: str | None = None


def canonical(fields: dict[str, object]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def row_fields(row: AuditEventRow) -> dict[str, object]:
    return {k: getattr(row, k) for k in HASHED_FIELDS}


def compute_hash(prev_hash: str, fields: dict[str, object]) -> str:
    return hashlib.sha256(prev_hash.encode() + b"\n" + canonical(fields)).hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append(s: Session, events: Sequence[AuditEvent]) -> list[AuditEventRow]:
    """Append events inside the caller's transaction (holding the chain lock until commit)."""
    repo.lock_chain(s)
    last = repo.head(s)
    idx = last.idx if last else 0
    prev = last.hash if last else GENESIS
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    rows = []
    for ev in events:
        idx += 1
        row = AuditEventRow(
            idx=idx,
            created_at=now,
            action=ev.action[:32],
            subject=ev.subject[:256],
            role=ev.role[:64],
            jti=ev.jti[:256],
            levels=",".join(str(int(x)) for x in ev.levels),
            key_version=ev.key_version,
            text_sha256=ev.text_sha256,
            outcome=ev.outcome[:64],
            detail=ev.detail,
            prev_hash=prev,
            hash="",
        )
        row.hash = compute_hash(prev, row_fields(row))
        prev = row.hash
        s.add(row)
        rows.append(row)
    s.flush()
    return rows


def append_or_fail(s: Session, events: Sequence[AuditEvent]) -> list[AuditEventRow]:
    """`append`, with any failure raised as AuditUnavailable (the caller's transaction then rolls back)."""
    try:
        return append(s, events)
    except Exception as exc:  # any failure means: no audit row, so no answer and no change
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def record(db: Database, events: Sequence[AuditEvent]) -> list[AuditEventRow]:
    """Append and commit; raises AuditUnavailable if the events are not durably in the chain."""
    try:
        with db.session() as s:
            return append(s, events)
    except Exception as exc:  # any failure means: no audit row, so no answer
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


@dataclass
class ChainReport:
    valid: bool
    events: int
    first_broken_index: int | None = None
    reason: str | None = None
    head_hash: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "valid": self.valid,
            "events": self.events,
            "first_broken_index": self.first_broken_index,
            "reason": self.reason,
            "head_hash": self.head_hash,
        }


def verify_chain(db: Database) -> ChainReport:
    prev = GENESIS
    expected = 1
    with db.session() as s:
        for row in repo.iterate(s):
            if row.idx != expected:
                return ChainReport(False, expected - 1, expected, f"event {expected} is missing (found {row.idx})")
            if row.prev_hash != prev:
                return ChainReport(False, expected - 1, expected, "prev_hash does not match the previous event")
            if compute_hash(prev, row_fields(row)) != row.hash:
                return ChainReport(False, expected - 1, expected, "event content does not match its hash")
            prev = row.hash
            expected += 1
    return ChainReport(True, expected - 1, None, None, prev if expected > 1 else None)


def event_dict(row: AuditEventRow) -> dict[str, object]:
    d = row_fields(row)
    d["levels"] = [int(x) for x in row.levels.split(",") if x]
    d["prev_hash"] = row.prev_hash
    d["hash"] = row.hash
    return d


def list_events(db: Database, after: int, limit: int) -> list[dict[str, object]]:
    with db.session() as s:
        return [event_dict(r) for r in repo.page(s, after, limit)]
