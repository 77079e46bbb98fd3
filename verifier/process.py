"""One builder for every process: the API, a Celery worker and the CLI.

Settings are read once per process (`verifier.base.settings.get_settings`, or the CLI's per-command copy) and
handed in; from them `build_process` makes the database (one way: migrated when embedded, with
`sqlite_synchronous`), the key store, the role policy, the profiles, the tokenizer cache and the one decode
runner. The API adds its own parts on top (verifier.api.context), a worker its drain context (`drain_context`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifier.auth.policy import Policy, load_policy
from verifier.base.db import Database, check_schema, upgrade
from verifier.base.secretfile import private_dir
from verifier.base.settings import Settings
from verifier.base.workslots import WorkSlots, auto_slots
from verifier.engine.profile import Profile, resolve_profile
from verifier.keys.deployment import deployment_profile
from verifier.keys.kek import make_kek_provider
from verifier.keys.service import DbKeyStore

if TYPE_CHECKING:  # the decode machinery (torch) is imported by build_process, not by a CLI that only opens keys
    from verifier.jobs.drain import DrainContext
    from verifier.lm import TokenizerCache
    from verifier.verify.runner import Runner


def open_database(settings: Settings, *, check: bool = False) -> Database:
    """The service database; SQLite (embedded default) is migrated on open, others must be at head (`check`:
    one line, "run `hero db upgrade`", instead of a traceback on an un-migrated database)."""
    private_dir(settings.home)
    if settings.should_auto_migrate:
        upgrade(settings.db_url)
    db = Database(settings.db_url, settings.sqlite_synchronous, pool_size=settings.db_pool_size,
                  max_overflow=settings.db_max_overflow, pgbouncer=settings.db_pgbouncer)
    if check:
        check_schema(db)
    return db


def open_store(settings: Settings, db: Database | None = None) -> DbKeyStore:
    """The service's encrypted key store (the same database and KEK in every process). Outside dev mode the KEK
    must exist already (`hero kek init`): a command that minted one here (`hero keys rotate` on a host without
    the shared KEK) would wrap keys under a KEK no other process has (issue 52, N8)."""
    from verifier.jobs.kek_rotation import rotate_kek
    from verifier.keys.bootstrap import require_secrets
    from verifier.lm import key_time_fingerprint

    db = db or open_database(settings, check=True)  # an unmigrated database is named first
    require_secrets(settings, log_key=False)
    return DbKeyStore(db, make_kek_provider(settings), rekey=rotate_kek, fingerprint=key_time_fingerprint)


def profile_lookup(*known: Profile) -> Callable[[str], Profile]:
    """Profile by the name stored on a job row: the loaded ones as they are, others read once per process."""
    cache = {p.name: p for p in known}
    lock = threading.Lock()

    def get(name: str) -> Profile:
        with lock:
            if name not in cache:
                cache[name] = resolve_profile(name)
            return cache[name]

    return get


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class Process:
    settings: Settings
    db: Database
    store: DbKeyStore
    policy: Policy
    profile: Profile  # the profile this process serves (HERO_PROFILE); jobs name theirs (`profiles`)
    profiles: Callable[[str], Profile]
    tokenizers: TokenizerCache
    runner: Runner

    def __repr__(self) -> str:
        return f"Process(profile={self.profile.name!r}, db={self.db.dialect})"

    def drain_context(self, worker: str, device: str = "cpu") -> DrainContext:
        from verifier.jobs.drain import DrainContext

        return DrainContext.from_settings(self.settings, self.db, self.store, self.policy, self.profiles,
                                          self.runner, worker=worker, device=pick_device(device))

    def close(self) -> None:
        self.runner.close()
        self.db.dispose()


def model_slots(settings: Settings) -> WorkSlots:
    """This process's bound on model-aware decodes (HERO_MODEL_AWARE_CONCURRENCY, else sized from the host)."""
    return WorkSlots(settings.model_aware_concurrency or auto_slots(), settings.model_aware_queue_seconds)


def build_process(settings: Settings, *, tokenizer_loader: Callable[[str], Any] | None = None,
                  check: bool = False) -> Process:
    from verifier.lm import TokenizerCache
    from verifier.verify.runner import Runner
    from verifier.verify.scoring import deployment_sampling, model_aware_limits, model_aware_scorer

    db = open_database(settings, check=check)
    store = open_store(settings, db)
    profile = resolve_profile(deployment_profile(settings.profile, db))
    tokenizers = TokenizerCache(tokenizer_loader)
    return Process(settings=settings, db=db, store=store, policy=load_policy(settings.roles_file), profile=profile,
                   profiles=profile_lookup(profile), tokenizers=tokenizers,
                   runner=Runner(store, tokenizers, settings.alpha, slots=model_slots(settings),
                                 scorer=model_aware_scorer(settings.model_aware, settings.worker_device,
                                                           deployment_sampling(settings),
                                                           settings.model_aware_statistic,
                                                           settings.model_aware_edit_floors,
                                                           **model_aware_limits(settings))))


class ProcessLocal:
    """One Process per OS process (Celery workers): a forked child builds its own, lazily on its first task
    (engines and locks do not survive fork)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._process: Process | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Process:
        with self._lock:
            if self._process is None or self._pid != os.getpid():
                self._process = build_process(self.settings)
                self._pid = os.getpid()
            return self._process
