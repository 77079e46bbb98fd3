"""KEK rotation bookkeeping: re-wrap every job's data key and retire a KEK only when nothing (key rows or
jobs) wraps under it any more, so no job fails later because its data key became unreadable. Lives in
jobs/ because it reads both jobs and key rows (keys/ may not import jobs/)."""

from __future__ import annotations

from sqlalchemy import func, select

from verifier.db import Database
from verifier.jobs.models import JobRow
from verifier.jobs.service import _job_aad
from verifier.keys.kek import KekError, KekProvider
from verifier.keys.models import KeyVersionRow


class KekInUse(KekError):
    pass


def rewrap_jobs(db: Database, kek: KekProvider) -> int:
    """Re-wraps every job's data key under the current KEK (texts and results do not change)."""

    n = 0
    with db.session() as s:
        current = kek.current_id()
        q = select(JobRow).where(JobRow.kek_id != current)
        if s.get_bind().dialect.name == "postgresql":
            q = q.with_for_update()
        for job in s.scalars(q):
            aad = _job_aad(job.id)
            job.kek_id, job.wrapped_dek = kek.wrap(kek.unwrap(job.kek_id, job.wrapped_dek, aad), aad)
            n += 1
    return n


def kek_usage(db: Database, kek_id: str) -> tuple[int, int]:
    """(key versions, jobs) whose data key is wrapped by `kek_id`."""
    with db.snapshot() as s:
        keys = s.scalar(select(func.count()).select_from(KeyVersionRow).where(KeyVersionRow.kek_id == kek_id))
        jobs = s.scalar(select(func.count()).select_from(JobRow).where(JobRow.kek_id == kek_id))
    return int(keys or 0), int(jobs or 0)


def retire_kek(db: Database, kek, kek_id: str) -> None:
    keys, jobs = kek_usage(db, kek_id)
    if keys or jobs:
        raise KekInUse(
            f"KEK {kek_id} still wraps {keys} key version(s) and {jobs} job(s); run 'hero kek rotate' "
            "(which re-wraps them) before retiring it"
        )
    kek.retire(kek_id)
