"""POST /v1/verify."""

from __future__ import annotations

from fastapi import APIRouter

from verifier.auth.dependencies import VerifyCaller
from verifier.context import Ctx
from verifier.verify.release import check_texts, requested_level
from verifier.verify.runner import DecodeJob
from verifier.verify.schemas import VerifyIn, VerifyOut
from verifier.verify.service import verify_texts

router = APIRouter(prefix="/v1", tags=["verify"])


@router.post(
    "/verify",
    response_model=VerifyOut,
    summary="Detect and decode texts",
    description="Returns only levels <= the caller's role maximum (server policy). Every disclosure is "
    "appended to the audit chain before the response is sent; if that fails the answer is 503.",
    responses={401: {"description": "bad or missing token"}, 403: {"description": "action or level not allowed"},
               409: {"description": "no keys yet"}, 413: {"description": "too large"},
               422: {"description": "bad input"}, 503: {"description": "KEK or audit log unavailable"}},
)
def verify(body: VerifyIn, ctx: Ctx, p: VerifyCaller) -> dict:
    level = requested_level(p, body.max_level)
    check_texts(body.texts, ctx.settings.max_texts, ctx.settings.max_text_chars)
    job = DecodeJob(ctx.profile, tuple(body.texts), level, ctx.settings.alpha)
    return {"results": verify_texts(ctx.runner, ctx.db, job, p.actor)}
