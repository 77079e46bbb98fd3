"""Audit API schemas: the events `/v1/audit/events` lists and the transparency-log receipts answers carry (one
home: the endpoints in verifier/api/ and the other services' schemas use these)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ReceiptOut(BaseModel):
    """Proof that this answer's audit event is in the log (check offline with
    `verifier.audit.transparency.verify_receipt` and the log's public key; see docs/transparency.md)."""

    version: int = Field(default=1, description="receipt version: 2 = the event is hashed in RFC 8785 (JCS) and "
                         "says so (`canon`: \"jcs\"); 1 (or absent) = in Python json's sorted ASCII form, no `canon`")
    leaf_index: int = Field(description="0-based position of the event in the log (event idx - 1)")
    inclusion_proof: list[str] = Field(description="RFC 9162 inclusion proof: base64 SHA-256 hashes")
    checkpoint: str = Field(description="signed checkpoint (C2SP signed note) of a tree that contains the event")
    event: dict[str, Any] = Field(description="the audit event's hashed fields (its leaf data: canonical JSON in "
                                  "the form its `canon` names)")


class AuditEventOut(BaseModel):
    """One audit event as listed: its hashed fields (`verifier.audit.chain.row_fields`, `levels` as a list), its
    chain links, and `issuer` / `canon` as None where the event has none (those two are hashed only when set).
    The one definition of the listed event: `service.event_dict` builds exactly these keys."""

    idx: int
    created_at: str
    action: str
    subject: str
    role: str
    jti: str
    levels: list[int]
    key_version: str | None
    text_sha256: str | None
    outcome: str
    detail: str | None
    prev_hash: str
    hash: str
    # the token issuer that vouched for `subject` (None: the operator's CLI, or an event written before issuers
    # were recorded); part of the hashed fields only when set (verifier/audit/chain.row_fields)
    issuer: str | None = None
    # the canonicalisation the event is hashed in ("jcs": RFC 8785; None: Python json's form, events written
    # before); hashed when set (verifier/audit/transparency.py, CANON_KEY)
    canon: str | None = None


class AuditEventsOut(BaseModel):
    events: list[AuditEventOut]
    next_after: int | None
