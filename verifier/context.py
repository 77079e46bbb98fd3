"""Per-app service context: settings, DB, key store, token verifier, policy, profile, job runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifier.audit.signer import LogSigner
from verifier.auth.jwt import TokenVerifier
from verifier.auth.policy import Policy
from verifier.db import Database
from verifier.engine.profile import Profile
from verifier.jobs.base import JobRunner
from verifier.keys.service import DbKeyStore
from verifier.ratelimit import RateLimiter
from verifier.settings import Settings


@dataclass
class ServiceContext:
    settings: Settings
    db: Database
    store: DbKeyStore
    tokens: TokenVerifier
    policy: Policy
    profile: Profile
    runner: JobRunner
    signer: LogSigner | None = None  # signs transparency-log checkpoints
    limiter: RateLimiter | None = None  # per-subject / per-role quotas
    jobs: Any = None  # verifier.jobs.dispatch.InProcessDispatcher | CeleryDispatcher

    def __repr__(self) -> str:
        return f"ServiceContext(profile={self.profile.name!r}, db={self.db.dialect})"
