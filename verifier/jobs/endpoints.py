"""POST /v1/jobs (202 + job id) and GET /v1/jobs/{job_id} (status, progress, results)."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from verifier.auth.dependencies import Principal, require
from verifier.bodies import JsonRoute
from verifier.jobs import store as jobs
from verifier.keys.kek import KekError
from verifier.verify.endpoints import charge_quota, check_texts
from verifier.verify.schemas import ResultOut

log = logging.getLogger("hero.jobs")
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonRoute)


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, description="texts (limits: HERO_JOB_MAX_TEXTS, HERO_MAX_TEXT_CHARS)")
    max_level: int | None = Field(default=None, ge=1, le=64, description="default: the role's maximum")


class JobAccepted(BaseModel):
    job_id: str


class Progress(BaseModel):
    total: int
    done: int


class JobOut(BaseModel):
    job_id: str
    status: str = Field(description="queued | running | done | failed")
    progress: Progress
    max_level: int
    created_at: str | None
    updated_at: str | None
    error: str | None
    results: list[ResultOut] | None = Field(description="in input order, once status is done (as /v1/verify)")


@router.post(
    "",
    status_code=202,
    response_model=JobAccepted,
    summary="Queue a decode job",
    description="Texts are stored encrypted; the job runs on Celery workers when HERO_BROKER_URL is set, in "
    "this process otherwise. Results are audited like /v1/verify when they are stored.",
    responses={401: {}, 403: {}, 413: {}, 422: {}, 429: {"description": "quota reached (Retry-After)"}, 503: {}},
)
def submit(body: JobIn, request: Request, p: Principal = Depends(require("verify"))) -> dict:
    ctx = request.app.state.ctx
    level = p.max_level if body.max_level is None else body.max_level
    if level > p.max_level:
        raise HTTPException(403, f"level {level} not allowed for role {p.role!r} (maximum {p.max_level})")
    check_texts(body.texts, ctx.settings.job_max_texts, ctx.settings.max_text_chars)
    charge_quota(ctx, p, len(body.texts))
    try:
        job_id = jobs.create_job(
            ctx.db, ctx.store.kek, owner_sub=p.sub, role=p.role, jti=p.jti, profile=ctx.profile.name,
            max_level=level, alpha=ctx.settings.alpha, texts=body.texts,
        )
    except KekError:
        raise HTTPException(503, "key material is unavailable (KEK)") from None
    try:
        ctx.jobs.submit(job_id)
        jobs.mark_enqueued(ctx.db, job_id)
    except Exception as exc:  # stored durably: workers re-enqueue stale jobs once the broker is back
        log.warning("job not enqueued", extra={"job_id": job_id, "error": exc.__class__.__name__})
    return {"job_id": job_id}


@router.get(
    "/{job_id}",
    response_model=JobOut,
    summary="Job status and results",
    description="Only the job's owner (token subject) or a role with `jobs.read_all` may read a job.",
    responses={401: {}, 403: {}, 404: {}},
)
def status(job_id: str, request: Request, p: Principal = Depends(require("verify"))) -> dict:
    try:
        job_id = str(uuid.UUID(job_id))
    except ValueError:
        raise HTTPException(404, "no such job") from None
    found = jobs.job_view(request.app.state.ctx.db, job_id)
    if found is None:
        raise HTTPException(404, "no such job")
    info, doc = found
    if info.owner_sub != p.sub and "jobs.read_all" not in p.actions:
        raise HTTPException(404, "no such job")  # do not reveal other subjects' job ids
    return doc
