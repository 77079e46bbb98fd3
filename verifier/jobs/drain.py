"""Drain one job: claim a batch, decode it as one tensor batch, store results + audit; repeat.

The same function runs in the API process (no broker configured) and in Celery workers (`workers/`).
It is idempotent: a second call for a finished job, or a re-delivered message, finds nothing to claim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verifier.audit.service import AuditEvent
from verifier.auth.policy import Policy
from verifier.db import Database
from verifier.engine.decoder import DecodeError
from verifier.engine.keystore import KeyStoreError
from verifier.engine.profile import Profile
from verifier.jobs import store as jobs
from verifier.jobs.decode import decode_with_material
from verifier.jobs.keys import handed_summary, tables_for
from verifier.keys.kek import KekError
from verifier.keys.service import DbKeyStore

log = logging.getLogger("hero.jobs")


@dataclass
class DrainContext:
    db: Database
    store: DbKeyStore
    profiles: Callable[[str], Profile]
    tokenizer: Callable[[str], Any]  # tokenizer name -> tokenizer (cached by the caller)
    policy: Policy | None
    worker: str
    batch_size: int = 32
    lease_s: float = 60.0
    max_attempts: int = 5
    device: str = "cpu"
    delay_s: float = 0.0  # test hook only (see workers.runtime): sleep before storing each batch

    def __repr__(self) -> str:
        return f"DrainContext(worker={self.worker!r}, batch={self.batch_size})"


@dataclass
class DrainOutcome:
    written: int
    wait: float | None  # seconds until another worker's lease expires (items left but not claimable now)


def _events(job: jobs.JobInfo, claim: jobs.Claim, results: list[dict]) -> list[AuditEvent]:
    from verifier.verify.service import _outcome

    return [
        AuditEvent(
            action="verify",
            subject=job.owner_sub,
            role=job.role,
            jti=job.jti,
            levels=[lv["level"] for lv in r["levels"]],
            key_version=",".join(lv["key_version"] or f"l{lv['level']}-none" for lv in r["levels"]) or None,
            text_sha256=sha,
            outcome=_outcome(r),
            detail=f"job={job.id} item={idx}",
        )
        for (_, idx, _, _, sha), r in zip(claim.items, results, strict=True)
    ]


def drain(dc: DrainContext, job_id: str) -> DrainOutcome:
    from verifier.verify.service import _shape

    written = 0
    profile = material = handed = None
    try:
        while True:
            c = jobs.claim(dc.db, job_id, dc.worker, dc.batch_size, dc.lease_s)
            if c is None:
                return DrainOutcome(written, None)
            if not c.items:
                return DrainOutcome(written, jobs.wait_hint(dc.db, job_id))
            if jobs.max_attempts_seen(dc.db, c) > dc.max_attempts:
                jobs.fail(dc.db, job_id, f"items could not be decoded after {dc.max_attempts} attempts")
                return DrainOutcome(written, None)
            try:
                texts = jobs.open_texts(dc.store.kek, c)
                if material is None:
                    profile = dc.profiles(c.job.profile)
                    material = tables_for(dc.store, profile, c.job, dc.policy)
                    handed = handed_summary(material)
                assert profile is not None and handed is not None
                tok = dc.tokenizer(profile.tokenizer)
                raw = decode_with_material(material, profile, texts, c.job.alpha, tok, dc.device)
            except (DecodeError, KeyStoreError, KekError) as exc:
                msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
                jobs.fail(dc.db, job_id, msg)
                log.warning("job failed", extra={"job_id": job_id, "error": exc.__class__.__name__})
                return DrainOutcome(written, None)
            del texts
            results = [_shape(r, c.job.max_level) for r in raw]
            if dc.delay_s:
                time.sleep(dc.delay_s)
            n = jobs.complete(dc.db, c, results, _events(c.job, c, results), handed)
            written += n
            log.info("job batch stored", extra={"job_id": job_id, "items": n, "worker": dc.worker})
    finally:
        del material
