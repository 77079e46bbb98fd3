"""Per-process state of a Celery worker, built lazily on the first task (never at import or fork):
DB engine, key store, policy, profiles and the tokenizer cache (each loaded once per process)."""

from __future__ import annotations

import logging
import os
import threading

from verifier.auth.policy import load_policy
from verifier.db import Database
from verifier.jobs import service as jobs
from verifier.jobs.drain import DrainContext, profile_lookup
from verifier.keys.kek import make_kek_provider
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.settings import Settings

log = logging.getLogger("hero.worker")


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class WorkerRuntime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(settings.db_url, settings.sqlite_synchronous)
        self.store = DbKeyStore(self.db, make_kek_provider(settings))
        self.policy = load_policy(settings.roles_file)
        self.profiles = profile_lookup()
        self.tokenizers = TokenizerCache()
        self.device = pick_device(settings.worker_device)

    def context(self) -> DrainContext:
        return DrainContext.from_settings(
            self.settings, self.db, self.store, self.policy, self.profiles, self.tokenizers, worker="worker",
            device=self.device,
        )


class ProcessLocal:
    """One WorkerRuntime per process: a forked child builds its own (engines and locks do not survive fork)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._runtime: WorkerRuntime | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> WorkerRuntime:
        with self._lock:
            if self._runtime is None or self._pid != os.getpid():
                self._runtime = WorkerRuntime(self.settings)
                self._pid = os.getpid()
            return self._runtime


def recover_once(db: Database, stale_s: float, submit) -> list[str]:
    """Re-enqueue unfinished jobs nobody touched for stale_s (lost messages, dead workers, broker restarts)."""
    ids = jobs.stale_jobs(db, stale_s)
    for job_id in ids:
        submit(job_id)
    if ids:
        log.info("re-enqueued stale jobs", extra={"jobs": len(ids)})
    return ids


def recovery_loop(settings: Settings, submit, stop: threading.Event) -> None:
    db = Database(settings.db_url)
    while not stop.is_set():
        try:
            recover_once(db, settings.job_stale_seconds, submit)
        except Exception as exc:  # broker or DB down: try again next round
            log.warning("job recovery failed", extra={"error": exc.__class__.__name__})
        stop.wait(settings.job_recover_interval_seconds)
