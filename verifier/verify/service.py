"""Verification: decode through the runner, append the audit events, then release the shaped results."""

from __future__ import annotations

import time

from verifier.audit.service import Actor, record, record_with_receipts, text_digest
from verifier.audit.signer import LogSigner
from verifier.db import Database
from verifier.metrics import DISCLOSURES, VERIFY_SECONDS, VERIFY_TEXTS
from verifier.verify.release import audit_events, shape
from verifier.verify.runner import DecodeJob, DecodeRunner


def verify_texts(
    runner: DecodeRunner, db: Database, job: DecodeJob, actor: Actor, signer: LogSigner | None = None,
    interval_s: float = 0.0,
) -> list[dict]:
    """Decode, audit (committed first: no audit row, no answer), release; with `signer`, each result carries
    its event's transparency-log receipt, made in the same transaction as the events."""
    t0 = time.perf_counter()
    raw = runner.decode(job)
    VERIFY_SECONDS.observe(time.perf_counter() - t0)
    results = [shape(r, job.max_level) for r in raw]
    events = audit_events(actor, [text_digest(t) for t in job.texts], results)
    if signer is None:
        record(db, events)  # committed before anything is returned: no audit row, no answer (AuditUnavailable)
    else:
        for result, receipt in zip(results, record_with_receipts(db, events, signer, interval_s), strict=True):
            result["receipt"] = receipt
    DISCLOSURES.labels(actor.role, str(job.max_level)).inc(len(events))
    for e in events:
        VERIFY_TEXTS.labels(e.outcome).inc()
    return results
