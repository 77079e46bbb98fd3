"""Celery tasks. Message body: {"job_id": ...} only; texts and keys are read from the DB by the worker."""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_ready

from verifier.jobs import store as jobs
from verifier.jobs.dispatch import DRAIN_TASK, QUEUE
from verifier.jobs.drain import drain
from verifier.settings import Settings
from workers.app import app
from workers.runtime import runtime

log = logging.getLogger("hero.worker")


@app.task(name=DRAIN_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def drain_job(self, job_id: str) -> dict:
    """Idempotent: claims what is left of the job, decodes it in batches, stores results + audit."""
    out = drain(runtime().context(), str(job_id))
    if out.wait is not None:  # another worker holds leases: look again when they expire
        self.app.send_task(DRAIN_TASK, kwargs={"job_id": str(job_id)}, queue=QUEUE, countdown=out.wait + 0.5)
    return {"written": out.written}


def recover_once(db, stale_s: float) -> list[str]:
    """Re-enqueue unfinished jobs nobody touched for stale_s (lost messages, dead workers, broker restarts)."""
    ids = jobs.stale_jobs(db, stale_s)
    for job_id in ids:
        app.send_task(DRAIN_TASK, kwargs={"job_id": job_id}, queue=QUEUE, retry=False)
    if ids:
        log.info("re-enqueued stale jobs", extra={"jobs": len(ids)})
    return ids


def _recover_loop(settings: Settings, stop: threading.Event) -> None:
    from verifier.db import Database

    db = Database(settings.db_url)
    while not stop.is_set():
        try:
            recover_once(db, settings.job_stale_seconds)
        except Exception as exc:  # broker or DB down: try again next round
            log.warning("job recovery failed", extra={"error": exc.__class__.__name__})
        stop.wait(settings.job_recover_interval_seconds)


_stop = threading.Event()


@worker_ready.connect
def _start_recovery(**_kw) -> None:
    threading.Thread(target=_recover_loop, args=(Settings(), _stop), name="hero-recover", daemon=True).start()
