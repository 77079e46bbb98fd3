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

from verifier.auth.jwt import TokenVerifier
from verifier.auth.policy import Policy, load_policy
from verifier.db import Database, upgrade
from verifier.engine.profile import Profile, resolve_profile
from verifier.jobs.dispatch import CeleryDispatcher, Dispatcher, InProcessDispatcher
from verifier.jobs.drain import DrainContext, profile_lookup
from verifier.keys.kek import make_kek_provider
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.settings import Settings
from verifier.verify.runner import DecodeRunner, InProcessRunner


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

    def __repr__(self) -> str:
        return f"ServiceContext(profile={self.profile.name!r}, db={self.db.dialect})"

    def close(self) -> None:
        self.jobs.close()
        self.runner.close()
        self.db.dispose()


def build_context(
    settings: Settings,
    *,
    tokenizer_loader: Callable[[str], Any] | None = None,
    runner: DecodeRunner | None = None,
) -> ServiceContext:
    if settings.should_auto_migrate:
        upgrade(settings.db_url)
    db = Database(settings.db_url)
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
    runner = runner or InProcessRunner(store, tokenizers)
    return ServiceContext(settings=settings, db=db, store=store, tokens=TokenVerifier(settings), policy=policy,
                          profile=profile, tokenizers=tokenizers, runner=runner, jobs=jobs)


def get_context(request: Request) -> ServiceContext:
    return request.app.state.ctx


Ctx = Annotated[ServiceContext, Depends(get_context)]
