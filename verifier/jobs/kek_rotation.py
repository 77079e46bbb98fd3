"""KEK rotation bookkeeping: re-wrap every job's data key and retire a KEK only when nothing (key rows or
jobs) wraps under it any more, so no job fails later because its data key became unreadable. Lives in
jobs/ because it reads both jobs and key rows (keys/ may not import jobs/).

`rotate_kek` is `hero kek rotate` and also the second half of destroying a key version (`DbKeyStore.rekey`):
copies of the destroyed row that the database cannot erase (PostgreSQL's pg_wal, a WAL archive, a backup)
are sealed under KEKs that no longer exist once every live data key is re-wrapped and the old KEKs retired."""

from __future__ import annotations

import logging

from sqlalchemy import func, select

from verifier.base.db import Database
from verifier.jobs.models import JobRow
from verifier.jobs.service import _job_aad
from verifier.keys.kek import KekError, KekProvider
from verifier.keys.models import KeyVersionRow

log = logging.getLogger("hero.kek")


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


def rotate_kek(store, actor=None, *, retire_old: bool = True) -> dict:
    """A new current KEK; every key row's and job's data key re-wrapped under it (the key rows' re-wrap
    audited as `kek.rotate` in its own transaction); with `retire_old`, every older KEK destroyed. A job
    written under an old KEK while this ran is re-wrapped by a second pass before that KEK goes."""
    kek = store.kek
    new_id = kek.rotate()
    old = [kid for kid in kek.ids() if kid != new_id]
    n = store.rewrap_all(actor=actor, new_kek=new_id)
    n_jobs = rewrap_jobs(store.db, kek)
    retired = []
    if retire_old:
        for kid in old:
            if any(kek_usage(store.db, kid)):  # a job that raced the first pass
                n += store.rewrap_all()
                n_jobs += rewrap_jobs(store.db, kek)
            retire_kek(store.db, kek, kid)  # still refuses while anything uses it
            retired.append(kid)
    log.info("KEK rotated", extra={"kek_id": new_id, "retired": len(retired)})
    return {"kek_id": new_id, "rewrapped": n, "rewrapped_jobs": n_jobs, "retired": retired}
