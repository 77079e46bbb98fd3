"""POST /v1/jobs (202 + job id) and GET /v1/jobs/{job_id} (status, progress, results)."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx, ServiceContext
from verifier.api.dependencies import VerifyCaller
from verifier.auth.principal import Principal
from verifier.errors import NotFound
from verifier.jobs import service as jobs
from verifier.jobs.schemas import JobAccepted, JobIn, JobListOut, JobOut
from verifier.metrics import JOB_TEXTS, JOBS

log = logging.getLogger("hero.jobs")
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonRoute)


@router.post(
    "",
    status_code=202,
    response_model=JobAccepted,
    summary="Queue a decode job",
    description="Texts are stored encrypted; the job runs on Celery workers when HERO_BROKER_URL is set, in "
    "this process otherwise. Results are audited like /v1/verify when they are stored. The `Location` header "
    "names the job's status URL.",
    responses={401: {}, 403: {}, 413: {}, 422: {}, 429: {"description": "quota reached (Retry-After)"}, 503: {}},
)
async def submit(body: JobIn, ctx: Ctx, p: VerifyCaller, response: Response) -> dict:
    grant = await ctx.admit(p, body.texts, ctx.settings.job_max_texts, body.max_level)
    return await run_in_threadpool(_queue, ctx, p, grant.level, body.texts, response)


def _queue(ctx: ServiceContext, p: Principal, level: int, texts: list[str], response: Response) -> dict:
    job_id = jobs.create_job(
        ctx.db, ctx.store.kek, owner_sub=p.sub, owner_iss=p.iss, role=p.role, jti=p.jti, profile=ctx.profile.name,
        max_level=level, alpha=ctx.settings.alpha, texts=texts,
    )
    try:
        ctx.jobs.submit(job_id)
        jobs.mark_enqueued(ctx.db, job_id)
    except Exception as exc:  # stored durably: workers re-enqueue stale jobs once the broker is back
        log.warning("job not enqueued", extra={"job_id": job_id, "error": exc.__class__.__name__})
    JOBS.labels("submitted").inc()
    JOB_TEXTS.labels("submitted").inc(len(texts))
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    return {"job_id": job_id}


@router.get(
    "",
    response_model=JobListOut,
    summary="List jobs (own jobs; every job with `jobs.read_all`)",
    description="Newest first, without results. A job belongs to the (issuer, subject, role) that submitted "
    "it; only jobs whose level the caller's role covers are listed. Page with `offset` = `next_offset`.",
    responses={401: {}, 403: {}, 422: {}},
)
def list_jobs(
    ctx: Ctx,
    p: VerifyCaller,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict:
    rows = jobs.list_jobs(ctx.db, p, limit + 1, offset)
    return {"jobs": rows[:limit], "next_offset": offset + limit if len(rows) > limit else None}


@router.get(
    "/{job_id}",
    response_model=JobOut,
    summary="Job status and results",
    description="A job belongs to the (issuer, subject, role) that submitted it; a role with `jobs.read_all` may "
    "read any job. Either way the reader's level must cover the job's level. Every read that releases results "
    "is audited (`jobs.read`) and carries that event's transparency-log receipt.",
    responses={401: {}, 403: {}, 404: {}, 503: {}},
)
def status(job_id: str, ctx: Ctx, p: VerifyCaller) -> dict:
    try:
        job_id = str(uuid.UUID(job_id))
    except ValueError:
        raise NotFound("no such job") from None
    doc = jobs.read_job(ctx.db, job_id, p, ctx.signer, ctx.settings.checkpoint_interval_seconds)
    if doc is None:
        raise NotFound("no such job")  # unknown, or not the caller's: the same answer
    return doc
