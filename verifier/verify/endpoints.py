"""POST /v1/verify."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request

from verifier.audit.service import AuditUnavailable
from verifier.auth.dependencies import Principal, require
from verifier.bodies import JsonRoute
from verifier.engine.decoder import DecodeError
from verifier.engine.keystore import KeyStoreError
from verifier.keys.kek import KekError
from verifier.ratelimit import RateLimited, RateStoreUnavailable
from verifier.verify.schemas import VerifyIn, VerifyOut
from verifier.verify.service import verify_texts

router = APIRouter(prefix="/v1", tags=["verify"], route_class=JsonRoute)


def check_texts(texts: list[str], max_texts: int, max_chars: int) -> None:
    if len(texts) > max_texts:
        raise HTTPException(413, f"too many texts: {len(texts)} (at most {max_texts} per request)")
    for i, t in enumerate(texts):
        if len(t) > max_chars:
            raise HTTPException(413, f"text {i} is too long: {len(t)} characters (at most {max_chars})")
        if not t.strip():
            raise HTTPException(422, f"text {i} is empty")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPException(422, f"text {i} is not valid Unicode (lone surrogate)") from None


def charge_quota(ctx, p: Principal, n: int) -> None:
    """Counts n texts against the caller's quotas (429 + Retry-After when over; 503 if the store is down)."""
    role = ctx.policy.role(p.role)
    try:
        ctx.limiter.charge(p.role, f"{p.iss}:{p.sub}", role.limits if role else None, n)
    except RateLimited as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
    except RateStoreUnavailable as exc:
        raise HTTPException(503, str(exc)) from None


@router.post(
    "/verify",
    response_model=VerifyOut,
    summary="Detect and decode texts",
    description="Returns only levels <= the caller's role maximum (server policy). Every disclosure is "
    "appended to the audit chain before the response is sent; if that fails the answer is 503.",
    responses={401: {"description": "bad or missing token"}, 403: {"description": "action or level not allowed"},
               413: {"description": "too large"}, 422: {"description": "bad input"},
               429: {"description": "quota reached (Retry-After)"}, 503: {"description": "audit log or KEK down"}},
)
def verify(body: VerifyIn, request: Request, p: Principal = Depends(require("verify"))) -> dict:
    ctx = request.app.state.ctx
    level = p.max_level if body.max_level is None else body.max_level
    if level > p.max_level:
        raise HTTPException(403, f"level {level} not allowed for role {p.role!r} (maximum {p.max_level})")
    check_texts(body.texts, ctx.settings.max_texts, ctx.settings.max_text_chars)
    charge_quota(ctx, p, len(body.texts))
    try:
        results = verify_texts(ctx, p, body.texts, level)
    except DecodeError as exc:
        raise HTTPException(422, str(exc).splitlines()[0] if str(exc) else "text cannot be decoded") from None
    except KekError:
        raise HTTPException(503, "key material is unavailable (KEK)") from None
    except KeyStoreError as exc:
        raise HTTPException(409, f"{exc}".splitlines()[0]) from None
    except AuditUnavailable:
        raise HTTPException(503, "audit log unavailable; no result released") from None
    return {"results": results}
