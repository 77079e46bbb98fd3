"""Audit API schemas shared by the endpoints that return transparency-log receipts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ReceiptOut(BaseModel):
    """Proof that this answer's audit event is in the log (check offline with
    `verifier.audit.transparency.verify_receipt` and the log's public key; see docs/transparency.md)."""

    leaf_index: int = Field(description="0-based position of the event in the log (event idx - 1)")
    inclusion_proof: list[str] = Field(description="RFC 9162 inclusion proof: base64 SHA-256 hashes")
    checkpoint: str = Field(description="signed checkpoint (C2SP signed note) of a tree that contains the event")
    event: dict[str, Any] = Field(description="the audit event's hashed fields (its leaf data, canonical JSON)")
