"""/v1/audit: read events, verify the hash chain (auditor, admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from verifier.audit.service import list_events, verify_chain
from verifier.auth.dependencies import AuditReader
from verifier.context import Ctx

router = APIRouter(prefix="/v1/audit", tags=["audit"])


class AuditEventOut(BaseModel):
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


class AuditEventsOut(BaseModel):
    events: list[AuditEventOut]
    next_after: int | None


class ChainReportOut(BaseModel):
    valid: bool
    events: int
    first_broken_index: int | None
    reason: str | None
    head_hash: str | None


@router.get("/events", response_model=AuditEventsOut, summary="Audit events after an index")
def events(
    ctx: Ctx,
    p: AuditReader,
    after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict:
    evs = list_events(ctx.db, after, limit)
    return {"events": evs, "next_after": evs[-1]["idx"] if len(evs) == limit else None}


@router.get("/verify", response_model=ChainReportOut, summary="Check the hash chain; report the first broken index")
def verify(ctx: Ctx, p: AuditReader) -> dict:
    return verify_chain(ctx.db).to_dict()
