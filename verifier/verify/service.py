"""Verification: decode through the runner, append the audit events, then release the shaped results."""

from __future__ import annotations

import time

from verifier.audit.service import Actor, record, text_digest
from verifier.db import Database
from verifier.metrics import DISCLOSURES, VERIFY_SECONDS, VERIFY_TEXTS
from verifier.verify.release import audit_events, shape
from verifier.verify.runner import DecodeJob, DecodeRunner


def verify_texts(runner: DecodeRunner, db: Database, job: DecodeJob, actor: Actor) -> list[dict]:
    t0 = time.perf_counter()
    raw = runner.decode(job)
    VERIFY_SECONDS.observe(time.perf_counter() - t0)
    results = [shape(r, job.max_level) for r in raw]
    events = audit_events(actor, [text_digest(t) for t in job.texts], results)
    record(db, events)  # committed before anything is returned: no audit row, no answer (AuditUnavailable)
    DISCLOSURES.labels(actor.role, str(job.max_level)).inc(len(events))
    for e in events:
        VERIFY_TEXTS.labels(e.outcome).inc()
    return results
