"""Celery workers re-enqueue stale jobs: lost messages, dead workers and broker restarts only delay a job."""

from __future__ import annotations

import logging
import threading

from verifier.base.db import Database
from verifier.jobs import service as jobs
from verifier.jobs.retention import maybe_purge

log = logging.getLogger("hero.worker")


def recover_once(db: Database, stale_s: float, submit, parts=None) -> list[str]:
    """Re-enqueue unfinished jobs nobody touched for stale_s (lost messages, dead workers, broker restarts).
    `parts(items_left)`: how many drain messages a job with that many items left becomes (default one)."""
    ids = jobs.stale_jobs(db, stale_s)
    left = jobs.items_left(db, ids) if parts is not None and ids else {}
    for job_id in ids:
        if parts is None:
            submit(job_id)
        else:
            submit(job_id, parts=parts(left.get(job_id, 1)))
    if ids:
        log.info("re-enqueued stale jobs", extra={"jobs": len(ids)})
    return ids


def recovery_loop(db: Database, stale_s: float, interval_s: float, submit, stop: threading.Event,
                  parts=None, retention_s: float = 0.0) -> None:
    """Re-enqueues stale jobs every `interval_s`; with `retention_s`, also purges finished jobs past it."""
    while not stop.is_set():
        try:
            recover_once(db, stale_s, submit, parts)
            if retention_s:
                maybe_purge(db, retention_s)
        except Exception as exc:  # broker or DB down: try again next round
            log.warning("job recovery failed", extra={"error": exc.__class__.__name__})
        stop.wait(interval_s)
