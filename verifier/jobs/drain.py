"""Drain one job: claim a batch, decode it as one tensor batch, store results + audit; repeat.

The same function runs in the API process (no broker configured) and in Celery workers (`workers/`).
It is idempotent: a second call for a finished job, or a re-delivered message, finds nothing to claim.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any

from verifier.audit.service import Actor
from verifier.auth.policy import Policy
from verifier.db import Database
from verifier.engine.availability import make_decoder
from verifier.engine.profile import Profile, resolve_profile
from verifier.errors import DomainError
from verifier.jobs import service as jobs
from verifier.jobs.material import handed_summary, tables_for
from verifier.keys.service import DbKeyStore
from verifier.settings import Settings
from verifier.verify.decode import decode_material
from verifier.verify.release import audit_events, shape

log = logging.getLogger("hero.jobs")


def process_name(prefix: str) -> str:
    """`prefix:host:pid`: which process claimed (and stored) an item."""
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}"


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


@dataclass
class DrainContext:
    db: Database
    store: DbKeyStore
    profiles: Callable[[str], Profile]
    tokenizer: Callable[[str], Any]  # tokenizer name -> tokenizer (the process's TokenizerCache)
    policy: Policy | None
    worker: str
    batch_size: int = 32
    lease_s: float = 60.0
    max_attempts: int = 5
    device: str = "cpu"
    delay_s: float = 0.0  # test hook only (Settings.drain_delay_s): sleep before storing each batch
    stop: threading.Event | None = None  # set on shutdown: the drain returns at its next batch boundary

    def __repr__(self) -> str:
        return f"DrainContext(worker={self.worker!r}, batch={self.batch_size})"

    @classmethod
    def from_settings(
        cls, settings: Settings, db: Database, store: DbKeyStore, policy: Policy | None,
        profiles: Callable[[str], Profile], tokenizer: Callable[[str], Any], *, worker: str, device: str = "cpu",
    ) -> DrainContext:
        return cls(
            db=db, store=store, profiles=profiles, tokenizer=tokenizer, policy=policy, worker=process_name(worker),
            batch_size=settings.job_batch_size, lease_s=settings.job_lease_seconds,
            max_attempts=settings.job_max_attempts, device=device, delay_s=settings.drain_delay_s,
        )


@dataclass
class DrainOutcome:
    written: int
    wait: float | None  # seconds until another worker's lease expires (items left but not claimable now)


class _Storer:
    """Stores a batch (results + audit events, one transaction) on a background thread while the drain decodes
    the next one: SQLite's and the fsync's time, the tokenizer's and the kernel's run without the GIL and
    overlap. At most one batch is in flight; `finish` waits for it and raises what storing it raised."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[int] | None = None

    def submit(self, fn: Callable[[], int]) -> None:
        assert self._pending is None, "one batch in flight at most"
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hero-job-store")
        self._pending = self._pool.submit(fn)

    def finish(self) -> int:
        """Items the batch in flight wrote (0 if none was); its exception, if storing it failed."""
        fut, self._pending = self._pending, None
        return fut.result() if fut is not None else 0

    def close(self) -> None:
        try:
            if self._pending is not None:  # only after an error in the drain itself, which propagates
                wait([self._pending])
                if (exc := self._pending.exception()) is not None:
                    log.error("job batch not stored", extra={"error": exc.__class__.__name__})
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def drain(dc: DrainContext, job_id: str) -> DrainOutcome:
    """Claims batches until none is left; each batch is decoded here and stored while the next one decodes.

    A batch's claim is taken while no store is in flight (SQLite has one writer: it would wait for that
    commit). A store that fails (e.g. the audit log) stops the drain with its exception before anything else
    is claimed or stored; its items stay claimed until their lease expires, as after a crash.
    """
    written = 0
    profile = material = handed = decoder = dek = None
    storer = _Storer()
    try:
        c = jobs.claim(dc.db, job_id, dc.worker, dc.batch_size, dc.lease_s)
        while True:
            if c is None or (dc.stop is not None and dc.stop.is_set()):  # done, or shutdown (a claim held
                return DrainOutcome(written + storer.finish(), None)  # then expires with its lease)
            if not c.items:
                written += storer.finish()
                return DrainOutcome(written, jobs.wait_hint(dc.db, job_id))
            if c.attempts > dc.max_attempts:
                written += storer.finish()
                jobs.fail(dc.db, job_id, f"items could not be decoded after {dc.max_attempts} attempts")
                return DrainOutcome(written, None)
            try:
                if dek is None:
                    dek = jobs.job_key(dc.store.kek, c.job)  # unwrapped once per drain, not per batch
                texts = jobs.open_texts(dc.store.kek, c, dek)
                if material is None:
                    profile = dc.profiles(c.job.profile)
                    material = tables_for(dc.store, profile, c.job, dc.policy)
                    handed = handed_summary(material)
                    # key words expanded once per drain, not per batch
                    decoder = make_decoder(profile, material.tables, alpha=c.job.alpha,
                                           unavailable=material.unavailable)
                assert profile is not None and handed is not None
                tok = dc.tokenizer(profile.tokenizer)
                raw = decode_material(material, profile, texts, c.job.alpha, tok, dc.device,
                                      decoder if dc.device == "cpu" else None)
            except DomainError as exc:
                written += storer.finish()
                jobs.fail(dc.db, job_id, str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__)
                log.warning("job failed", extra={"job_id": job_id, "error": exc.__class__.__name__})
                return DrainOutcome(written, None)
            del texts
            results = [shape(r, c.job.max_level) for r in raw]
            actor = Actor(c.job.owner_sub, c.job.role, c.job.jti)
            details = [f"job={c.job.id} item={idx}" for _, idx, *_ in c.items]
            events = audit_events(actor, [sha for *_, sha in c.items], results, details)
            if dc.delay_s:
                time.sleep(dc.delay_s)
            written += storer.finish()  # the previous batch: stored, or its failure raised here
            nxt = jobs.claim(dc.db, job_id, dc.worker, dc.batch_size, dc.lease_s, c.next_idx)
            storer.submit(partial(_store, dc, c, results, events, handed))
            c = nxt
    finally:
        try:
            storer.close()
        finally:
            del material, decoder, dek


def _store(dc: DrainContext, c: jobs.Claim, results: list[dict], events: list, handed: dict[int, list[str]]) -> int:
    n = jobs.complete(dc.db, c, results, events, handed)
    log.info("job batch stored", extra={"job_id": c.job.id, "items": n, "worker": dc.worker})
    return n
