"""POST /v1/verify and POST /v1/verify/evidence."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx, ServiceContext
from verifier.api.dependencies import EvidenceReader, VerifyCaller
from verifier.audit.service import record
from verifier.auth.policy import Grant
from verifier.auth.principal import Principal
from verifier.base.errors import DomainError, InvalidInput
from verifier.verify.evidence import token_evidence
from verifier.verify.expect import check_cap, refusal_events
from verifier.verify.runner import DecodeJob
from verifier.verify.schemas import EvidenceIn, EvidenceOut, VerifyIn, VerifyOut
from verifier.verify.service import VerifyRequest, expected_levels, verify_texts

router = APIRouter(prefix="/v1", tags=["verify"], route_class=JsonRoute)
ERRORS: dict[int | str, dict] = {
    401: {"description": "bad or missing token"}, 403: {"description": "action or level not allowed"},
    409: {"description": "no keys yet"}, 413: {"description": "too large"}, 422: {"description": "bad input"},
    429: {"description": "quota reached (Retry-After)"}, 503: {"description": "KEK, audit log or database unavailable"},
}


@router.post(
    "/verify",
    response_model=VerifyOut,
    summary="Detect and decode texts",
    description="Returns only levels <= the caller's role maximum (server policy). Every disclosure is "
    "appended to the audit chain before the response is sent (if that fails the answer is 503), and each "
    "result carries its event's transparency-log receipt, checkable offline (docs/transparency.md).",
    responses=ERRORS,
)
async def verify(body: VerifyIn, ctx: Ctx, p: VerifyCaller, request: Request) -> dict:
    texts, own = body.plain_texts(), body.text_expects()
    if not any(own):
        return {"results": await verify_call(ctx, p, texts, body.max_level, body.expect, request.receive)}
    if body.expect:
        raise InvalidInput("give `expect` per text or for the whole request, not both")
    return {"results": await verify_each_expect(ctx, p, texts, own, body.max_level, request.receive)}


async def verify_each_expect(ctx: ServiceContext, p: Principal, texts: list[str],
                             expects: list[dict[str, int] | None], max_level: int | None,
                             receive: Callable[[], Awaitable[dict]] | None = None) -> list[dict]:
    """Texts with an `expect` of their own: admitted (and charged) once as one request, every `expect` vetted and
    the cap checked over all of them together (32 per-text values about one text are 32 questions, not 32 first
    ones), then one decode per distinct `expect`, results back in input order."""
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(expects):
        groups.setdefault(tuple(sorted((e or {}).items())), []).append(i)
    asked: dict[tuple, tuple[tuple[int, int], ...]] = {}

    def vet(grant: Grant) -> None:
        try:
            for key in groups:
                asked[key] = expected_levels(ctx.profile, dict(key) or None, grant.level)
            check_cap(ctx.db, p.actor, [(texts[i], asked[key]) for key, idx in groups.items() for i in idx],
                      ctx.settings.expect_max_values)
        except DomainError as exc:
            record(ctx.db, [ev for i, t in enumerate(texts)
                            for ev in refusal_events(p.actor, [t], expects[i], exc.status, grant.level)])
            raise

    results: list[dict] = [{}] * len(texts)
    async with model_slot(ctx):
        grant = await ctx.admit(p, texts, ctx.settings.max_texts, max_level, vet=vet)
        for key, idx in groups.items():
            out = await run_verify(ctx, p, DecodeJob(ctx.profile, tuple(texts[i] for i in idx), grant.level,
                                                     ctx.settings.alpha, expect=asked[key],
                                                     slot_held=ctx.model_aware), receive)
            for i, r in zip(idx, out, strict=True):
                results[i] = r
    return results


async def _disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the client has gone (the body is read already: the next ASGI message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancellable(ctx: ServiceContext, p: Principal, job: DecodeJob,
                       receive: Callable[[], Awaitable[dict]] | None, cap: int | None = None) -> list[dict]:
    """A model-aware decode on its own (not micro-batched: its cost is the LM's, and one caller's cancel must stop
    only its own work), stopped at its next check when the client disconnects (verifier/base/cancel.py)."""
    cancel = threading.Event()
    job = dataclasses.replace(job, cancel=cancel)
    work = asyncio.ensure_future(run_in_threadpool(verify_texts, ctx.runner, ctx.db, job, p.actor, ctx.signer,
                                                   ctx.settings.checkpoint_interval_seconds, cap))
    if receive is None:
        return await work
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            cancel.set()  # the client left (or this task was cancelled): the LM stops within one layer
        watch.cancel()
    return await work


async def verify_call(ctx: ServiceContext, p: Principal, texts: list[str], max_level: int | None,
                      expect: dict[str, int] | None = None,
                      receive: Callable[[], Awaitable[dict]] | None = None) -> list[dict]:
    """The body of POST /v1/verify once the caller and the input are known (also verifier.api.fastpath);
    `receive`: the request's ASGI receive, watched for a disconnect while a model-aware decode runs."""
    asked: tuple[tuple[int, int], ...] = ()

    def vet(grant: Grant) -> None:  # after the quota: a refused `expect` is charged, then audited
        nonlocal asked
        asked = vet_expect(ctx, p, texts, expect, grant.level)

    async with model_slot(ctx):  # model-aware: a slot first (503 when none frees in time), then the charge
        grant = await ctx.admit(p, texts, ctx.settings.max_texts, max_level, vet=vet if expect else None)
        return await run_verify(ctx, p, DecodeJob(ctx.profile, tuple(texts), grant.level, ctx.settings.alpha,
                                                  expect=asked, slot_held=ctx.model_aware), receive)


@asynccontextmanager
async def model_slot(ctx: ServiceContext) -> AsyncIterator[None]:
    """With model-aware scoring, one of the process's slots (verifier/base/workslots.py) for the whole request, taken
    before the quota is charged: a request answered 503 because every slot stayed busy costs the caller nothing.
    Without it, nothing."""
    if not ctx.model_aware:
        yield
        return
    slots = ctx.runner.slots
    await run_in_threadpool(slots.acquire)
    try:
        yield
    finally:
        slots.release()


async def run_verify(ctx: ServiceContext, p: Principal, job: DecodeJob,
                     receive: Callable[[], Awaitable[dict]] | None = None) -> list[dict]:
    """An admitted decode, audited and released: model-aware on its own, else through the micro-batcher. With
    `expect`, the cap is enforced again where the values are counted (under the audit chain's lock)."""
    cap = ctx.settings.expect_max_values if job.expect else None
    if ctx.model_aware:
        return await _cancellable(ctx, p, job, receive, cap)
    if ctx.batcher is not None:  # answered after the batch's audit transaction commits
        return await ctx.batcher.verify(VerifyRequest(job, p.actor, cap))
    return await run_in_threadpool(verify_texts, ctx.runner, ctx.db, job, p.actor, ctx.signer,
                                   ctx.settings.checkpoint_interval_seconds, cap)


def vet_expect(ctx: ServiceContext, p: Principal, texts: list[str], expect: dict[str, int] | None,
               level: int) -> tuple[tuple[int, int], ...]:
    """`expect` as (level, value) pairs, or the refusal (403/422, also when the caller reached
    HERO_EXPECT_MAX_VALUES for a text), recorded as `verify.refused` events before it is raised."""
    try:
        asked = expected_levels(ctx.profile, expect, level)
        check_cap(ctx.db, p.actor, [(t, asked) for t in texts], ctx.settings.expect_max_values)
        return asked
    except DomainError as exc:
        record(ctx.db, refusal_events(p.actor, texts, expect, exc.status, level))
        raise


@router.post(
    "/verify/evidence",
    response_model=EvidenceOut,
    summary="Per-token level-1 evidence of one text (trusted roles)",
    description="Which tokens carry the level-1 mark, for a person looking at one text (the console highlights "
    "them). Level 1 only, and only when its own evidence is significant (`decoded`, `detected`, `mixed`). "
    "Such a map is a fast oracle for "
    "the level-1 keys, so it needs the action `evidence.read` (auditors and admins in the shipped policy); "
    "each call is an audit event (`verify.evidence`) with its receipt, committed before the answer.",
    responses=ERRORS,
)
async def evidence(body: EvidenceIn, ctx: Ctx, p: EvidenceReader) -> dict:
    await ctx.admit(p, [body.text], ctx.settings.max_texts, 1, lm_runs=False)  # level 1 only, whatever the role
    return await run_in_threadpool(token_evidence, ctx.runner, ctx.db, ctx.profile, body.text, p.actor, ctx.signer,
                                   ctx.settings.checkpoint_interval_seconds)
