"""POST /v1/jobs (202 + job id; `Idempotency-Key`), GET /v1/jobs/{job_id} (status, progress, results) and
GET /v1/jobs/{job_id}/results (paged by cursor, or one NDJSON stream)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx, ServiceContext
from verifier.api.dependencies import VerifyCaller
from verifier.auth.principal import Principal
from verifier.base.errors import BadRequest, Conflict, InvalidInput, NotFound
from verifier.base.metrics import JOB_TEXTS, JOBS
from verifier.jobs import service as jobs
from verifier.jobs.dispatch import fanout
from verifier.jobs.retention import maybe_purge
from verifier.jobs.schemas import IndexedResult, JobAccepted, JobIn, JobListOut, JobOut, JobResultsPage

log = logging.getLogger("hero.jobs")
_RESULT_LINE = TypeAdapter(IndexedResult)
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonRoute)


@router.post(
    "",
    status_code=202,
    response_model=JobAccepted,
    summary="Queue a decode job",
    description="Texts are stored encrypted; the job runs on Celery workers when HERO_BROKER_URL is set, in "
    "this process otherwise. Results are audited like /v1/verify when they are stored. The `Location` header "
    "names the job's status URL. With an `Idempotency-Key` header, a retry of the same request by the same "
    "caller answers the job the first one made (`Idempotent-Replayed: true`, nothing charged again); the key "
    "reused for other texts or level: 409.",
    responses={401: {}, 403: {}, 409: {"description": "Idempotency-Key reused for another request"}, 413: {},
               422: {}, 429: {"description": "quota reached (Retry-After)"}, 503: {}},
)
async def submit(
    body: JobIn, ctx: Ctx, p: VerifyCaller, response: Response,
    idempotency_key: Annotated[str | None, Header(description="1-255 visible ASCII characters, unique per "
                                                  "request of this caller (e.g. a UUID)")] = None,
) -> dict:
    digest = None
    if idempotency_key is not None:
        if not _KEY_RE.fullmatch(idempotency_key):
            raise InvalidInput("Idempotency-Key: 1-255 visible ASCII characters")
        digest = jobs.request_digest(body.texts, body.max_level)
        replay = await run_in_threadpool(_replay, ctx, p, idempotency_key, digest, response)
        if replay is not None:
            ctx.policy.grant(p.role, ctx.profile, body.max_level)  # a role since refused submitting is refused
            return replay
    grant = await ctx.admit(p, body.texts, ctx.settings.job_max_texts, body.max_level, per_request_tokens=False)
    return await run_in_threadpool(_queue, ctx, p, grant.level, body.texts, response, idempotency_key, digest)


_KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")


def _replay(ctx: ServiceContext, p: Principal, key: str, digest: str, response: Response) -> dict | None:
    """The job this caller made with `key`, if any (409 when it was made by another request)."""
    found = jobs.job_for_key(ctx.db, jobs.owner_key(p), key)
    if found is None:
        return None
    job_id, made_by = found
    if made_by != digest:
        raise Conflict("Idempotency-Key was used for a different request")
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    response.headers["Idempotent-Replayed"] = "true"
    return {"job_id": job_id}


def _queue(ctx: ServiceContext, p: Principal, level: int, texts: list[str], response: Response,
           key: str | None = None, digest: str | None = None) -> dict:
    maybe_purge(ctx.db, ctx.settings.job_retention_seconds)  # at most once a minute: jobs past their retention
    try:
        job_id = jobs.create_job(
            ctx.db, ctx.store.kek, owner_sub=p.sub, owner_iss=p.iss, role=p.role, jti=p.jti,
            profile=ctx.profile.name, max_level=level, alpha=ctx.settings.alpha, texts=texts,
            idempotency_key=key, request_sha256=digest,
        )
    except IntegrityError:  # a concurrent request with the same key stored its job first
        if key is None or digest is None:
            raise
        replay = _replay(ctx, p, key, digest, response)
        if replay is None:
            raise
        return replay
    try:
        ctx.jobs.submit(job_id, parts=fanout(len(texts), ctx.settings.job_batch_size, ctx.settings.job_fanout_max))
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
def status(
    job_id: str, ctx: Ctx, p: VerifyCaller,
    results: Annotated[bool, Query(description="false: status only, no results (and no `jobs.read` event); "
                                   "large jobs read results through /v1/jobs/{job_id}/results")] = True,
) -> dict:
    return _found(jobs.read_job(ctx.db, _job_id(job_id), p, ctx.signer, ctx.settings.checkpoint_interval_seconds,
                                results=results))


def _job_id(job_id: str) -> str:
    """The path's job id in canonical form; anything that is not a UUID names no job (404)."""
    try:
        return str(uuid.UUID(job_id))
    except ValueError:
        raise NotFound("no such job") from None


def _found(doc: dict | None) -> dict:
    """The job's document; None (unknown, or not the caller's: the same answer) is a 404."""
    if doc is None:
        raise NotFound("no such job")
    return doc


RESULTS_PAGE = 1000
NDJSON = "application/x-ndjson"


@router.get(
    "/{job_id}/results",
    response_model=JobResultsPage,
    summary="A done job's results, page by page (or one NDJSON stream)",
    description="Results in input order from `cursor` (default: the first), at most `limit` per page, each with "
    "its `index`; follow `next_cursor` until it is null. Every page read is audited (`jobs.read`, naming its "
    "range) and carries that event's receipt. With `Accept: application/x-ndjson` the results from `cursor` "
    "to the end come as one stream, one result per line, then a last line `{\"end\": true, \"count\": n, "
    "\"receipt\": ...}` (a stream without it was cut short). Readers as for GET /v1/jobs/{job_id}; 409 until "
    "the job is done.",
    responses={200: {"content": {NDJSON: {}}}, 400: {"description": "not a cursor this service made"}, 401: {},
               403: {}, 404: {}, 409: {"description": "job not done"}, 422: {}, 503: {}},
)
def results(
    job_id: str,
    request: Request,
    ctx: Ctx,
    p: VerifyCaller,
    cursor: Annotated[str | None, Query(max_length=12, description="`next_cursor` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = RESULTS_PAGE,
):
    job_id = _job_id(job_id)
    # ASCII digits only: str.isdigit() also accepts "²" (which int() refuses: a 500) and Arabic-Indic digits
    if cursor is not None and not (cursor.isascii() and cursor.isdigit()):
        raise BadRequest("cursor: not a cursor this service made (ASCII digits, the `next_cursor` of a page)")
    start = int(cursor or 0)
    interval = ctx.settings.checkpoint_interval_seconds
    # The stream too reads (and audits, its receipt kept for the trailer) the first page before the answer starts,
    # so a missing job or one not done is a 404 / 409, not a broken stream.
    first = _found(jobs.read_results(ctx.db, job_id, p, start, limit, ctx.signer, interval))
    if NDJSON not in request.headers.get("accept", ""):
        return first
    return StreamingResponse(_ndjson(ctx, p, job_id, first, limit), media_type=NDJSON)


def _ndjson(ctx: ServiceContext, p: Principal, job_id: str, page: dict, limit: int) -> Iterator[bytes]:
    receipt, count = page["receipt"], 0
    while True:
        out = [json.dumps(_line(r), separators=(",", ":")) for r in page["results"]]
        count += len(out)
        if out:
            yield ("\n".join(out) + "\n").encode("utf-8")
        if page["next_cursor"] is None:
            break
        nxt = jobs.read_results(ctx.db, job_id, p, int(page["next_cursor"]), limit, receipt=False)
        assert nxt is not None  # jobs are never deleted while read
        page = nxt
    yield (json.dumps({"end": True, "count": count, "receipt": receipt}, separators=(",", ":")) + "\n").encode()


def _line(result: dict) -> dict:
    """A result as the page's schema serves it (the same fields, defaults and order)."""
    return _RESULT_LINE.dump_python(_RESULT_LINE.validate_python(result), mode="json")
