"""POST /v1/jobs (202 + job id) and GET /v1/jobs/{job_id} (status, progress, results)."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter

from verifier.auth.dependencies import VerifyCaller
from verifier.context import Ctx
from verifier.errors import NotFound
from verifier.jobs import service as jobs
from verifier.jobs.schemas import JobAccepted, JobIn, JobOut
from verifier.verify.release import check_texts, requested_level

log = logging.getLogger("hero.jobs")
router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post(
    "",
    status_code=202,
    response_model=JobAccepted,
    summary="Queue a decode job",
    description="Texts are stored encrypted; the job runs on Celery workers when HERO_BROKER_URL is set, in "
    "this process otherwise. Results are audited like /v1/verify when they are stored.",
    responses={401: {}, 403: {}, 413: {}, 422: {}, 503: {}},
)
def submit(body: JobIn, ctx: Ctx, p: VerifyCaller) -> dict:
    level = requested_level(p, body.max_level)
    check_texts(body.texts, ctx.settings.job_max_texts, ctx.settings.max_text_chars)
    job_id = jobs.create_job(
        ctx.db, ctx.store.kek, owner_sub=p.sub, role=p.role, jti=p.jti, profile=ctx.profile.name,
        max_level=level, alpha=ctx.settings.alpha, texts=body.texts,
    )
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
def status(job_id: str, ctx: Ctx, p: VerifyCaller) -> dict:
    try:
        job_id = str(uuid.UUID(job_id))
    except ValueError:
        raise NotFound("no such job") from None
    found = jobs.job_view(ctx.db, job_id)
    if found is None:
        raise NotFound("no such job")
    info, doc = found
    if info.owner_sub != p.sub and "jobs.read_all" not in p.actions:
        raise NotFound("no such job")  # do not reveal other subjects' job ids
    return doc
