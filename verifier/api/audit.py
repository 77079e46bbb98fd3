"""/v1/audit: events and chain checks (auditor, admin); checkpoints, proofs and the log's public key (any
authenticated caller: receipts are checked with them)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx
from verifier.api.dependencies import AuditReader, VerifyCaller, current_principal
from verifier.audit import merkle
from verifier.audit.schemas import AuditEventOut, AuditEventsOut
from verifier.audit.service import ChainReport, list_events, verify_chain
from verifier.auth.principal import Principal
from verifier.base.errors import InvalidInput, NotFound

# The listed event's schema has one home, the audit layer's (verifier/audit/schemas.py): re-exported here.
__all__ = ["AuditEventOut", "AuditEventsOut", "router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"], route_class=JsonRoute)


class ConsistencyOut(BaseModel):
    first: int
    second: int
    proof: list[str]


def _stored_time(raw: str | None, name: str) -> str | None:
    """An ISO-8601 time (a zone-less one is UTC) in the stored format, so that it compares as text."""
    if raw is None:
        return None
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)  # OverflowError past year 1..9999
    except (ValueError, OverflowError):
        raise InvalidInput(f"{name}: expected an ISO-8601 time such as 2026-01-31T12:00:00Z (years 1..9999 in "
                           "UTC)") from None
    return t.isoformat(timespec="microseconds")


@router.get(
    "/events",
    response_model=AuditEventsOut,
    summary="Audit events after an index, optionally filtered",
    description="Filters combine (AND): `subject` and `action` match exactly, `level` keeps events that "
    "disclosed that level, `since` (inclusive) and `until` (exclusive) bound the event time (ISO-8601; no zone "
    "means UTC). Page with `after` = the previous page's `next_after`.",
    responses={401: {}, 403: {}, 422: {}},
)
def events(
    ctx: Ctx,
    p: AuditReader,
    after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    subject: Annotated[str | None, Query(min_length=1, max_length=256, description="token subject")] = None,
    action: Annotated[str | None, Query(min_length=1, max_length=32, description="e.g. verify, jobs.read")] = None,
    level: Annotated[int | None, Query(ge=1, le=64, description="events that disclosed this level")] = None,
    since: Annotated[str | None, Query(max_length=40, description="ISO-8601, inclusive")] = None,
    until: Annotated[str | None, Query(max_length=40, description="ISO-8601, exclusive")] = None,
) -> dict:
    evs = list_events(ctx.db, after, limit, subject=subject, action=action, level=level,
                      since=_stored_time(since, "since"), until=_stored_time(until, "until"))
    return {"events": evs, "next_after": evs[-1]["idx"] if len(evs) == limit else None}


@router.get(
    "/verify",
    response_model=ChainReport,
    summary="Check the hash chain, the Merkle tree and the newest signed checkpoint; report the first broken index",
)
def verify(ctx: Ctx, p: AuditReader) -> dict:
    return verify_chain(ctx.db, ctx.signer.vkey).to_dict()


@router.get(
    "/checkpoint",
    response_class=PlainTextResponse,
    summary="The newest signed checkpoint (C2SP tlog-checkpoint, signed note), covering every event",
)
def checkpoint(ctx: Ctx, p: VerifyCaller) -> PlainTextResponse:
    _, note = merkle.current_checkpoint(ctx.db, ctx.signer, ctx.settings.checkpoint_interval_seconds)
    return PlainTextResponse(note)


@router.get("/public-key", response_class=PlainTextResponse, summary="The log's verifier key (<name>+<id>+<key>)",
            description="Also the key generation bundles are signed with: any authenticated role may read it "
            "(providers pin it, docs/providers.md).")
def public_key(ctx: Ctx, p: Annotated[Principal, Depends(current_principal)]) -> PlainTextResponse:
    return PlainTextResponse(ctx.signer.vkey + "\n")


@router.get("/consistency", response_model=ConsistencyOut, summary="Consistency proof between two tree sizes",
            responses={404: {}, 422: {}})
def consistency(
    ctx: Ctx,
    p: VerifyCaller,
    first: Annotated[int, Query(ge=0, le=2**31 - 1)],
    second: Annotated[int, Query(ge=0, le=2**31 - 1)],
) -> dict:
    if first > second:
        raise InvalidInput("first must not exceed second")
    try:
        proof = merkle.consistency(ctx.db, first, second)
    except ValueError as exc:
        raise NotFound(str(exc)) from None
    return {"first": first, "second": second, "proof": [base64.b64encode(h).decode() for h in proof]}
