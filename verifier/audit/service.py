"""Hash-chained audit log.

Event i (1-based, contiguous) stores prev_hash = hash of event i-1 (64 zeros for event 1) and
hash = SHA-256(prev_hash_hex || "\\n" || canonical JSON of its fields, idx included: RFC 8785 for events appended
now, marked `canon` = "jcs"; Python json's form for those written before, unmarked). Editing a row
breaks its own hash; deleting one breaks the index sequence; reordering breaks prev_hash/idx. The
verifier reports the first index at which the stored chain stops matching.

Each append also extends the transparency log (verifier.audit.merkle): a Merkle tree over the same
events with signed checkpoints, which makes truncation, tail rewrites and forks detectable against any
checkpoint published earlier.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from verifier.audit import merkle
from verifier.audit import repository as repo
from verifier.audit.chain import (
    APPEND_CANON,
    GENESIS,
    HASHED_FIELDS,
    AppendedEvent,
    canonical_row,
    compute_hash,
    hash_canonical,
    row_fields,
)
from verifier.audit.models import AuditEventRow
from verifier.audit.verification import ChainReport, verify_chain
from verifier.base.db import Database
from verifier.base.errors import Unavailable

__all__ = ["AUDIT_ACTIONS", "GENESIS", "HASHED_FIELDS", "Actor", "AuditEvent", "AuditUnavailable", "ChainReport",
           "append", "append_or_fail", "compute_hash", "record", "record_with_receipts", "row_fields", "verify_chain"]


class AuditUnavailable(Unavailable):
    """The audit log could not be written: the caller must not release the result or keep the change."""

    public_detail = "audit log unavailable; nothing was released or changed"


@dataclass(frozen=True)
class Actor:
    """Who an audited action is for: the token's subject, role and token id, and the issuer that vouched for the
    subject ("" for the operator's CLI): one `sub` at two issuers is two subjects."""

    subject: str
    role: str
    jti: str
    issuer: str = ""


# Every action the service records: the one list (the console's audit filter comes from it;
# tests/api/console/test_console_api.py checks that every action named where events are made is here).
AUDIT_ACTIONS = ("verify", "verify.refused", "verify.evidence", "decode", "jobs.read", "keys.init", "keys.rotate",
                 "keys.disable", "keys.enable", "keys.destroy", "keys.move_profile", "keys.use_profile", "keys.issue",
                 "keys.bundle", "kek.rotate", "providers.add", "providers.revoke", "generate", "jobs.purge")


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
    issuer: str | None = None

    @classmethod
    def of(cls, actor: Actor, action: str, levels: Sequence[int] = (), key_version: str | None = None,
           text_sha256: str | None = None, outcome: str = "ok", detail: str | None = None) -> AuditEvent:
        """The event of `action` done by `actor` (the one place an Actor becomes an event's who)."""
        return cls(action, actor.subject, actor.role, actor.jti, list(levels), key_version, text_sha256, outcome,
                   detail, actor.issuer[:256] or None)




def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append(s: Session, events: Sequence[AuditEvent]) -> list[AppendedEvent]:
    """Append events inside the caller's transaction (holding the chain lock until commit)."""
    last = repo.lock_chain_and_head(s)
    idx, prev = last if last else (0, GENESIS)
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    rows = []
    for ev in events:
        idx += 1
        row = AppendedEvent(
            idx=idx,
            created_at=now,
            action=ev.action[:32],
            subject=ev.subject[:256],
            role=ev.role[:64],
            jti=ev.jti[:256],
            levels=",".join(map(str, map(int, ev.levels))),
            key_version=ev.key_version,
            text_sha256=ev.text_sha256,
            outcome=ev.outcome[:64],
            detail=ev.detail,
            prev_hash=prev,
            hash="",
            issuer=ev.issuer,
            canon=APPEND_CANON,
        )
        row.leaf_data = data = canonical_row(row)
        row.hash = prev = hash_canonical(prev, data)
        rows.append(row)
    repo.insert_events(s, rows)  # one executemany; the returned rows are plain (detached) objects
    merkle.extend(s, rows)
    return rows


def append_or_fail(s: Session, events: Sequence[AuditEvent]) -> list[AppendedEvent]:
    """`append`, with any failure raised as AuditUnavailable (the caller's transaction then rolls back)."""
    try:
        return append(s, events)
    except Exception as exc:  # any failure means: no audit row, so no answer and no change
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def record(db: Database, events: Sequence[AuditEvent]) -> list[AppendedEvent]:
    """Append and commit; raises AuditUnavailable if the events are not durably in the chain."""
    try:
        with db.session() as s:
            return append(s, events)
    except Exception as exc:  # any failure means: no audit row, so no answer
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def record_with_receipts(db: Database, events: Sequence[AuditEvent], signer, interval_s: float) -> list[dict]:
    """`record`, plus one transparency-log receipt per event (same transaction: no receipt, no answer)."""
    try:
        with db.session() as s:
            return merkle.receipts(s, signer, append(s, events), interval_s)
    except Exception as exc:
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def record_prepared(db: Database, prepare: Callable[[Session], Sequence[AuditEvent]], signer=None,
                    interval_s: float = 0.0, *, reads: bool = True) -> tuple[list[AppendedEvent], list[dict] | None]:
    """`record` / `record_with_receipts` of the events `prepare(session)` makes. `reads`: prepare reads the log, so
    the chain lock is taken first: what it reads (e.g. the values a subject already asked about a text) cannot
    change before its events are appended, on any number of processes."""
    try:
        with db.session() as s:
            if reads:
                repo.lock_chain(s)
            rows = append(s, prepare(s))
            return rows, (merkle.receipts(s, signer, rows, interval_s) if signer is not None else None)
    except Exception as exc:
        raise AuditUnavailable(f"audit log unavailable ({exc.__class__.__name__})") from exc


def event_dict(row: AuditEventRow) -> dict[str, object]:
    d = row_fields(row)
    d["levels"] = [int(x) for x in row.levels.split(",") if x]
    d.setdefault("issuer", None)  # listed for every event; hashed only where set (chain.row_fields)
    d.setdefault("canon", None)  # likewise: None = Python json's form (events written before RFC 8785)
    d["prev_hash"] = row.prev_hash
    d["hash"] = row.hash
    return d


def list_events(db: Database, after: int, limit: int, **filters: object) -> list[dict[str, object]]:
    """Events after index `after`; `filters` (subject, action, level, since, until) narrow them (see
    `repository.search`)."""
    with db.snapshot() as s:
        if any(v is not None for v in filters.values()):
            return [event_dict(r) for r in repo.search(s, after, limit, **filters)]  # type: ignore[arg-type]
        return [event_dict(r) for r in repo.page(s, after, limit)]
