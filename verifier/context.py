"""The composition root of the API process: everything a request needs, built once per app.

`build_context` wires settings, database, key store, token verifier, policy, the loaded profile, the one
tokenizer cache, the /v1/verify runner and the job dispatcher. Endpoints receive it through the `Ctx`
dependency; nothing else reads `app.state`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from verifier.audit.signer import LogSigner, signer_from_settings
from verifier.auth.jwt import TokenVerifier
from verifier.auth.policy import Policy, load_policy
from verifier.db import Database, upgrade
from verifier.engine.profile import Profile, resolve_profile
from verifier.jobs.dispatch import CeleryDispatcher, Dispatcher, InProcessDispatcher
from verifier.jobs.drain import DrainContext, profile_lookup
from verifier.keys.kek import make_kek_provider
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.ratelimit import RateLimiter, make_rate_limiter
from verifier.secretfile import private_dir
from verifier.settings import Settings
from verifier.verify import service as verify_service
from verifier.verify.batcher import Batcher
from verifier.verify.runner import DecodeRunner, InProcessRunner
from verifier.verify.scoring import model_aware_scorer


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

    def __repr__(self) -> str:
        return f"ServiceContext(profile={self.profile.name!r}, db={self.db.dialect})"

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.jobs.close()
        self.runner.close()
        self.db.dispose()


def build_context(
    settings: Settings,
    *,
    tokenizer_loader: Callable[[str], Any] | None = None,
    runner: DecodeRunner | None = None,
) -> ServiceContext:
    private_dir(settings.home)
    if settings.should_auto_migrate:
        upgrade(settings.db_url)
    db = Database(settings.db_url, settings.sqlite_synchronous)
    store = DbKeyStore(db, make_kek_provider(settings))
    profile = resolve_profile(settings.profile)
    policy = load_policy(settings.roles_file)
    tokenizers = TokenizerCache(tokenizer_loader)
    if settings.broker_url:
        jobs: Dispatcher = CeleryDispatcher(settings)
    else:
        profiles = profile_lookup(profile)

        def drain_context() -> DrainContext:
            return DrainContext.from_settings(settings, db, store, policy, profiles, tokenizers, worker="api-inprocess")

        jobs = InProcessDispatcher(db, drain_context)
    runner = runner or InProcessRunner(store, tokenizers, settings.alpha,
                                       scorer=model_aware_scorer(settings.model_aware, settings.worker_device))
    ctx = ServiceContext(settings=settings, db=db, store=store, tokens=TokenVerifier(settings), policy=policy,
                         profile=profile, tokenizers=tokenizers, runner=runner, jobs=jobs,
                         signer=signer_from_settings(settings), limiter=make_rate_limiter(settings))
    if settings.verify_batching:
        ctx.batcher = make_batcher(ctx)
    return ctx


def make_batcher(ctx: ServiceContext) -> Batcher:
    s = ctx.settings

    def process(requests):  # through the module, so tests can replace the audit functions
        return verify_service.verify_batch(ctx.runner, ctx.db, requests, ctx.signer, s.checkpoint_interval_seconds)

    return Batcher(process, window_s=s.verify_batch_window_ms / 1000, max_texts=s.verify_batch_max_texts)


async def get_context(request: Request) -> ServiceContext:
    return request.app.state.ctx  # async: a sync dependency would cost a worker-thread hop per request


Ctx = Annotated[ServiceContext, Depends(get_context)]
