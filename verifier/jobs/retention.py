"""Job retention: finished jobs (their sealed results) are purged HERO_JOB_RETENTION_SECONDS after they ended, and
every purge is an audit event (`jobs.purge`: which jobs, how many results, under which setting).

Why: a job's rows keep encrypted texts' digests and released results; without a limit an admin (or anyone with
a quota) could store jobs without end. Purges run from the API process when jobs are submitted and from the Celery
workers' recovery loop, at most once a minute per process (`maybe_purge`), PURGE_BATCH jobs per transaction, each
batch committed with its event (no event, no delete).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from sqlalchemy import delete, select

from verifier.audit.service import Actor, AuditEvent, append_or_fail
from verifier.base.db import Database
from verifier.jobs.models import JobItemRow, JobRow

log = logging.getLogger("hero.jobs")

SERVICE = Actor("hero-service", "system", "job-retention")  # the purge is the service's own act, under its setting
PURGE_BATCH = 100
FINISHED = ("done", "failed")


def purge_expired(db: Database, retention_s: float, now: float | None = None) -> int:
    """Deletes finished jobs whose last change is older than `retention_s` (0: keep them), with their items; one
    `jobs.purge` event per batch, in the batch's transaction. Returns how many jobs were purged."""
    if retention_s <= 0:
        return 0
    cutoff = (time.time() if now is None else now) - retention_s
    before = datetime.fromtimestamp(cutoff, UTC).isoformat(timespec="seconds")
    purged = 0
    while True:
        with db.session() as s:
            ids = list(s.scalars(select(JobRow.id).where(JobRow.status.in_(FINISHED), JobRow.updated_at < cutoff)
                                 .order_by(JobRow.updated_at, JobRow.id).limit(PURGE_BATCH)))
            if not ids:
                return purged
            items = s.execute(delete(JobItemRow).where(JobItemRow.job_id.in_(ids))).rowcount
            s.execute(delete(JobRow).where(JobRow.id.in_(ids)))
            append_or_fail(s, [AuditEvent.of(SERVICE, "jobs.purge", (), None, None, "ok",
                                             f"jobs={len(ids)} items={items} retention_s={retention_s:g} "
                                             f"ended_before={before} ids={','.join(ids)}")])
        purged += len(ids)
        log.info("purged finished jobs", extra={"jobs": len(ids)})


_last: dict[int, float] = {}
_lock = threading.Lock()


def maybe_purge(db: Database, retention_s: float, every_s: float = 60.0) -> int:
    """`purge_expired`, at most once per `every_s` per database in this process; a failure is logged, not raised
    (the caller's own work goes on: the next round tries again)."""
    now = time.monotonic()
    with _lock:
        if retention_s <= 0 or now - _last.get(id(db), -every_s) < every_s:
            return 0
        _last[id(db)] = now
    try:
        return purge_expired(db, retention_s)
    except Exception as exc:
        log.warning("job purge failed", extra={"error": exc.__class__.__name__})
        return 0
