"""Drain one job: claim a batch, decode it through the process's runner, store results + audit; repeat.

The same function runs in the API process (no broker configured) and in Celery workers (`workers/`); both
decode through `verifier.verify.runner.Runner.run` at the level granted for the job under the policy in force.
It is idempotent: a second call for a finished job, or a re-delivered message, finds nothing to claim.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial

from verifier.audit.service import Actor
from verifier.auth.policy import Policy
from verifier.base.db import Database
from verifier.base.errors import DomainError
from verifier.base.settings import Settings
from verifier.engine.decoder import token_ids
from verifier.engine.profile import Profile
from verifier.jobs import service as jobs
from verifier.keys.kek import KekUnreachable
from verifier.keys.service import DbKeyStore
from verifier.verify.disclosure import audit_events
from verifier.verify.runner import DecodeJob, Runner

log = logging.getLogger("hero.jobs")

KEK_RETRY_S = 5.0  # a job whose KEK is unreachable is drained again after this long


def process_name(prefix: str) -> str:
    """`prefix:host:pid`: which process claimed (and stored) an item."""
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}"


@dataclass
class DrainContext:
    db: Database
    store: DbKeyStore
    profiles: Callable[[str], Profile]
    runner: Runner  # the process's one decode path (its material cache and tokenizers)
    policy: Policy
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
        cls, settings: Settings, db: Database, store: DbKeyStore, policy: Policy,
        profiles: Callable[[str], Profile], runner: Runner, *, worker: str, device: str = "cpu",
    ) -> DrainContext:
        return cls(
            db=db, store=store, profiles=profiles, runner=runner, policy=policy, worker=process_name(worker),
            batch_size=settings.job_batch_size_cuda if device.startswith("cuda") else settings.job_batch_size,
            lease_s=settings.job_lease_seconds,
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
        self._pending = self._pool.submit(contextvars.copy_context().run, fn)  # the drain's trace, log fields

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


Prepared = tuple[list[str], list[list[int]]]  # a claim's texts and their token ids
Prepare = Callable[[jobs.Claim], Prepared]


class _Ahead:
    """The claims after the one being decoded, each opened and tokenized on one background thread.

    Tokenization is most of a batch's CPU and runs without the GIL, so the next batch is tokenized while
    this one is decoded (and the previous one stored). Claims are made here only while no store is in
    flight (SQLite has one writer). A claim made two batches ahead is decoded two batches later, so it is
    made only while batches take at most 1/6 of the lease (`pace`); otherwise claims are made one at a time,
    as they are needed, and none waits past its lease to be taken again by this very drain. A drain
    that stops leaves its claims to expire with their lease, as after a crash."""

    def __init__(self, dc: DrainContext, job_id: str) -> None:
        self.dc, self.job_id = dc, job_id
        self.depth = 1  # until a batch has been timed
        self.queue: deque[tuple[jobs.Claim, Future[Prepared]]] = deque()
        self.end: jobs.Claim | None = None  # the claim that ended claiming: no items, or out of attempts
        self.final = False  # the job is final (or gone): nothing more to claim
        self._next_idx = 0
        self._pool: ThreadPoolExecutor | None = None

    def pace(self, batch_s: float) -> None:
        """How far ahead to claim, given `batch_s`: the seconds the last batch took, from taking it off the
        queue to handing it to the store."""
        self.depth = 2 if 6 * batch_s <= self.dc.lease_s else 1

    @property
    def open(self) -> bool:
        return self.end is None and not self.final

    def claim(self) -> jobs.Claim | None:
        """One claim, queued only when it holds items to decode (else it ends claiming and is returned)."""
        dc = self.dc
        c = jobs.claim(dc.db, self.job_id, dc.worker, dc.batch_size, dc.lease_s, self._next_idx)
        if c is None:
            self.final = True
        elif not c.items or c.attempts > dc.max_attempts:
            self.end = c
        else:
            self._next_idx = c.next_idx
        return c

    def fill(self, prepare: Prepare) -> None:
        while self.open and len(self.queue) < self.depth:
            c = self.claim()
            if self.open and c is not None:
                self.submit(c, prepare)

    def submit(self, c: jobs.Claim, prepare: Prepare) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hero-job-tokenize")
        self.queue.append((c, self._pool.submit(contextvars.copy_context().run, prepare, c)))

    def close(self) -> None:
        for _, fut in self.queue:
            fut.cancel()
        self.queue.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def drain(dc: DrainContext, job_id: str) -> DrainOutcome:
    """Claims batches until none is left; each batch is decoded here while the next one is tokenized and the
    previous one stored (one background thread each).

    A claim is taken while no store is in flight (SQLite has one writer: it would wait for that commit). A
    store that fails (e.g. the audit log) stops the drain with its exception before anything else is claimed
    or stored; its items stay claimed until their lease expires, as after a crash.
    """
    written = 0
    profile = level = dek = None
    storer = _Storer()
    ahead = _Ahead(dc, job_id)
    prepare = None
    try:
        first = ahead.claim()
        if first is None:
            return DrainOutcome(0, None)
        if ahead.open:
            try:
                dek = jobs.job_key(dc.store.kek, first.job)  # unwrapped once per drain, not per batch
                profile = dc.profiles(first.job.profile)
                # The job's level under the policy in force now: one that tightened since fails the job (403).
                level = dc.policy.grant(first.job.role, profile, first.job.max_level).level
                prepare = partial(_prepare, dc.store.kek, dek, dc.runner.tokenizers.for_profile(profile))
            except KekUnreachable:  # nothing is lost: the items wait, untried, until the KEK answers again
                jobs.release(dc.db, first)
                log.warning("KEK unreachable: job waits", extra={"job_id": job_id})
                return DrainOutcome(0, KEK_RETRY_S)
            except DomainError as exc:
                return _failed(dc, job_id, exc, 0)
            ahead.submit(first, prepare)
            ahead.fill(prepare)
        while ahead.queue:
            if dc.stop is not None and dc.stop.is_set():  # shutdown: the claims held expire with their lease
                return DrainOutcome(written + storer.finish(), None)
            t0 = time.monotonic()
            c, prepared = ahead.queue.popleft()
            assert profile is not None and level is not None
            try:
                texts, ids = prepared.result()
                results, handed = dc.runner.run(DecodeJob(profile, tuple(texts), level, c.job.alpha, dc.device, ids))
            except DomainError as exc:
                return _failed(dc, job_id, exc, written + storer.finish())
            del texts, ids
            actor = Actor(c.job.owner_sub, c.job.role, c.job.jti, c.job.owner_iss)
            details = [f"job={c.job.id} item={it.idx}" for it in c.items]
            events = audit_events(actor, [it.text_sha256 for it in c.items], results, details)
            if dc.delay_s:
                time.sleep(dc.delay_s)
            written += storer.finish()  # the previous batch: stored, or its failure raised here
            ahead.pace(time.monotonic() - t0)
            ahead.fill(prepare)
            storer.submit(partial(_store, dc, c, results, events, handed))
        written += storer.finish()
        end = ahead.end
        if end is None:  # the job is final (or gone)
            return DrainOutcome(written, None)
        if end.items:  # out of attempts
            jobs.fail(dc.db, job_id, f"items could not be decoded after {dc.max_attempts} attempts")
            return DrainOutcome(written, None)
        return DrainOutcome(written, jobs.wait_hint(dc.db, job_id))
    finally:
        try:
            storer.close()
        finally:
            ahead.close()
            del dek, prepare


def _prepare(kek, dek: bytes, tokenizer, c: jobs.Claim) -> Prepared:
    """On the tokenizer thread: a claim's texts and their token ids."""
    texts = jobs.open_texts(kek, c, dek)
    return texts, token_ids(tokenizer, texts)


def _failed(dc: DrainContext, job_id: str, exc: DomainError, written: int) -> DrainOutcome:
    jobs.fail(dc.db, job_id, str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__)
    log.warning("job failed", extra={"job_id": job_id, "error": exc.__class__.__name__})
    return DrainOutcome(written, None)


def _store(dc: DrainContext, c: jobs.Claim, results: list[dict], events: list, handed: dict[int, list[str]]) -> int:
    n = jobs.complete(dc.db, c, results, events, handed)
    log.info("job batch stored", extra={"job_id": c.job.id, "items": n, "worker": dc.worker})
    return n
