"""The API process's context: the shared process parts (verifier.process) plus what only the API needs.

`build_context` builds the process with `build_process` (database, key store, policy, profile, tokenizers, the
one decode runner), then adds the token verifier, the job dispatcher, the checkpoint signer, the rate limiter
and the /v1/verify micro-batcher. Endpoints receive it through the `Ctx` dependency; nothing else reads
`app.state`. `ServiceContext.admit` is the one admission check before any decode an endpoint starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from verifier.audit.signer import LogSigner, signer_from_settings
from verifier.auth.jwt import TokenVerifier
from verifier.auth.policy import Grant, Policy
from verifier.auth.principal import Principal
from verifier.base.db import Database
from verifier.base.ratelimit import MemoryCounter, RateLimiter, make_rate_limiter
from verifier.base.settings import Settings
from verifier.engine.profile import Profile
from verifier.jobs.dispatch import CeleryDispatcher, Dispatcher, InProcessDispatcher
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.process import build_process
from verifier.verify.admission import charge_quota, check_lm_tokens, check_texts
from verifier.verify.batcher import Batcher
from verifier.verify.runner import DecodeRunner
from verifier.verify.service import batch_worker

FOLLOW_SECONDS = 5.0  # how stale the served profile may be in a running service after `hero profile use`


@dataclass
class ServiceContext:
    settings: Settings
    db: Database
    store: DbKeyStore
    tokens: TokenVerifier
    policy: Policy
    profile: Profile
    tokenizers: TokenizerCache
    runner: DecodeRunner
    jobs: Dispatcher
    signer: LogSigner  # signs transparency-log checkpoints (receipts, GET /v1/audit/checkpoint)
    limiter: RateLimiter  # per-subject / per-role quotas on texts
    batcher: Batcher | None = None  # /v1/verify micro-batcher (None: HERO_VERIFY_BATCHING=0)
    # when the recorded served profile (`hero profile use`, verifier/keys/deployment.py) is read again (`follow`)
    next_follow: float = field(default=0.0, repr=False)

    def __repr__(self) -> str:
        return f"ServiceContext(profile={self.profile.name!r}, db={self.db.dialect})"

    async def admit(self, p: Principal, texts: Sequence[str], max_texts: int, requested: int | None = None, *,
                    vet: Callable[[Grant], object] | None = None, per_request_tokens: bool = True,
                    lm_runs: bool = True) -> Grant:
        """The level granted to `p` (403), the input limits (413/422: in LM tokens too when model-aware scoring
        will run), then the caller's quota (429; LM tokens counted when the LM runs), then `vet(grant)` (the
        request's own checks, in a thread: e.g. `expect`, whose refusal is audited): the same checks, in the same
        order, before every decode an endpoint starts. Nothing that writes comes before the quota: a refusal is
        charged like any request, and over quota nothing is written (a refusal storm cannot grow the audit log
        faster than the caller's quota). `per_request_tokens`: the per-request LM-token cap applies (an answer
        now; a job's texts are scored batch by batch); `lm_runs`: False where the endpoint never runs the LM
        (per-token evidence)."""
        await self.follow()
        grant = self.policy.grant(p.role, self.profile, requested)
        check_texts(texts, max_texts, self.settings.max_text_chars)
        lm_tokens = 0
        if self.model_aware and lm_runs:
            lm_tokens = await run_in_threadpool(self._lm_tokens, texts, per_request_tokens)
        if isinstance(self.limiter.counter, MemoryCounter):
            charge_quota(self.limiter, self.policy, p, len(texts), lm_tokens)  # in memory: no I/O on the loop
        else:
            await run_in_threadpool(charge_quota, self.limiter, self.policy, p, len(texts), lm_tokens)
        if vet is not None:
            await run_in_threadpool(vet, grant)
        return grant

    async def follow(self) -> None:
        """Serve the profile recorded with the keys (`hero profile use NAME` in any process): read at most once per
        FOLLOW_SECONDS, before a decode is admitted, so a running service follows a move without a restart. Never
        with HERO_PROFILE set (it overrides the recorded choice)."""
        now = time.monotonic()
        if self.settings.profile or now < self.next_follow:
            return
        self.next_follow = now + FOLLOW_SECONDS
        from verifier.engine.profile import resolve_profile
        from verifier.keys.deployment import recorded_profile

        name = await run_in_threadpool(recorded_profile, self.db)
        if name and name != self.profile.name:
            self.profile = await run_in_threadpool(resolve_profile, name)

    @property
    def model_aware(self) -> bool:
        return getattr(self.runner, "scorer", None) is not None

    def lm_token_cap(self) -> int:
        """LM tokens per text model-aware scoring reads: HERO_MODEL_AWARE_MAX_TOKENS, never past the model's context."""
        from verifier.lm import CONTEXT_LENGTHS

        return min(self.settings.model_aware_max_tokens, CONTEXT_LENGTHS.get(self.profile.tokenizer, 1 << 30))

    def _lm_tokens(self, texts: Sequence[str], per_request: bool) -> int:
        lengths = [len(x) for x in self.tokenizers.for_profile(self.profile).encode_ids(list(texts))]
        return check_lm_tokens(lengths, self.lm_token_cap(),
                               self.settings.model_aware_max_request_tokens if per_request else None)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.jobs.close()
        self.runner.close()
        self.db.dispose()


def build_context(settings: Settings, *, tokenizer_loader: Callable[[str], Any] | None = None) -> ServiceContext:
    from verifier.keys.bootstrap import require_secrets

    require_secrets(settings)  # outside dev mode, before anything could create them
    proc = build_process(settings, tokenizer_loader=tokenizer_loader)
    if settings.broker_url:
        jobs: Dispatcher = CeleryDispatcher(settings)
    else:
        jobs = InProcessDispatcher(proc.db, lambda: proc.drain_context("api-inprocess", settings.worker_device))
    ctx = ServiceContext(settings=settings, db=proc.db, store=proc.store, tokens=TokenVerifier(settings),
                         policy=proc.policy, profile=proc.profile, tokenizers=proc.tokenizers, runner=proc.runner,
                         jobs=jobs, signer=signer_from_settings(settings), limiter=make_rate_limiter(settings))
    if settings.verify_batching:
        ctx.batcher = Batcher(batch_worker(ctx, settings.checkpoint_interval_seconds),
                              window_s=settings.verify_batch_window_ms / 1000,
                              max_texts=settings.verify_batch_max_texts)
    return ctx


async def get_context(request: Request) -> ServiceContext:
    return request.app.state.ctx  # async: a sync dependency would cost a worker-thread hop per request


Ctx = Annotated[ServiceContext, Depends(get_context)]
