"""Job retention (verifier/jobs/retention.py): finished jobs older than HERO_JOB_RETENTION_SECONDS are purged with their
items, each purge an audit event naming the jobs; unfinished and recent jobs stay; 0 keeps every job."""

from __future__ import annotations

import time

from sqlalchemy import func, select, update

from tests.helpers.workers import make_texts
from verifier.audit.models import AuditEventRow
from verifier.jobs import retention
from verifier.jobs.models import JobItemRow, JobRow
from verifier.jobs.retention import maybe_purge, purge_expired

DAY = 86400.0


def _age(db, job_id: str, days: float) -> None:
    with db.session() as s:
        s.execute(update(JobRow).where(JobRow.id == job_id).values(updated_at=time.time() - days * DAY))


def _count(db, model, **where) -> int:
    with db.snapshot() as s:
        q = select(func.count()).select_from(model)
        for k, v in where.items():
            q = q.where(getattr(model, k) == v)
        return int(s.scalar(q))


def test_finished_jobs_past_retention_are_purged_and_audited(sqlite_url, make_service):
    svc = make_service(sqlite_url)
    assert svc.settings.job_retention_seconds == 30 * DAY  # the default
    svc.init_keys()
    texts = make_texts(svc, 3, steps=40)
    old, recent = svc.submit(texts, "admin"), svc.submit(texts[:1], "admin")
    svc.wait_done(old)
    svc.wait_done(recent)
    db = svc.ctx.db
    _age(db, old, 31)
    _age(db, recent, 29)
    assert purge_expired(db, 0) == 0  # 0: keep every job
    assert purge_expired(db, 30 * DAY) == 1
    assert _count(db, JobRow, id=old) == 0 and _count(db, JobItemRow, job_id=old) == 0
    assert _count(db, JobRow, id=recent) == 1 and _count(db, JobItemRow, job_id=recent) == 1
    assert svc.client.get(f"/v1/jobs/{old}", headers=svc.auth("admin")).status_code == 404
    with db.snapshot() as s:
        (ev,) = s.scalars(select(AuditEventRow).where(AuditEventRow.action == "jobs.purge")).all()
        assert ev.subject == "hero-service" and ev.role == "system"
        assert f"ids={old}" in ev.detail and "jobs=1 items=3" in ev.detail and "retention_s=2.592e+06" in ev.detail
    assert purge_expired(db, 30 * DAY) == 0  # nothing more to purge, no empty event
    assert _count(db, AuditEventRow, action="jobs.purge") == 1


def test_a_submission_purges_at_most_once_a_minute(sqlite_url, make_service):
    svc = make_service(sqlite_url, job_retention_seconds=DAY)
    svc.init_keys()
    texts = make_texts(svc, 1, steps=40)
    first = svc.submit(texts, "admin")
    svc.wait_done(first)
    _age(svc.ctx.db, first, 2)
    svc.wait_done(svc.submit(texts, "admin"))  # the first submission's purge was just now: throttled
    assert _count(svc.ctx.db, JobRow, id=first) == 1
    retention._last.clear()  # a minute later
    svc.wait_done(svc.submit(texts, "admin"))  # this submission purges the first job
    assert _count(svc.ctx.db, JobRow, id=first) == 0
    assert maybe_purge(svc.ctx.db, DAY) == 0  # throttled again
