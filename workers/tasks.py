"""Celery tasks: thin wrappers over `verifier.jobs`. Message body: {"job_id": ...} only."""

from __future__ import annotations

import threading
from functools import partial

from celery.signals import worker_ready

from verifier.base import tracing
from verifier.jobs.dispatch import fanout
from verifier.jobs.drain import drain
from verifier.jobs.queue import DRAIN_TASK, send_drain
from verifier.jobs.recovery import recovery_loop
from verifier.process import ProcessLocal, open_database
from workers.app import app, settings

runtime = ProcessLocal(settings)  # database, key store, policy, profiles, tokenizers, runner: once per process


@app.task(name=DRAIN_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def drain_job(self, job_id: str) -> dict:
    """Idempotent: claims what is left of the job, decodes it in batches, stores results + audit."""
    dc = runtime().drain_context("worker", settings.worker_device)
    tracing.instrument_engine(dc.db.engine)  # once per process (the first call)
    out = drain(dc, str(job_id))
    if out.wait is not None:  # another worker holds leases: look again when they expire
        send_drain(self.app, str(job_id), countdown=out.wait + 0.5)
    return {"written": out.written}


_stop = threading.Event()


@worker_ready.connect
def _start_metrics(**_kw) -> None:
    """/metrics of this worker (HERO_WORKER_METRICS_PORT): its counters and the job queue's gauges."""
    if settings.worker_metrics_port is None:
        return
    from verifier.jobs.observe import serve_worker_metrics

    serve_worker_metrics(open_database(settings), settings.worker_metrics_port, settings.worker_metrics_host)


@worker_ready.connect
def _start_recovery(**_kw) -> None:
    parts = partial(fanout, batch_size=settings.job_batch_size, most=settings.job_fanout_max)
    loop = partial(recovery_loop, open_database(settings), settings.job_stale_seconds,
                   settings.job_recover_interval_seconds, partial(send_drain, app), _stop, parts,
                   settings.job_retention_seconds)
    threading.Thread(target=loop, name="hero-recover", daemon=True).start()
