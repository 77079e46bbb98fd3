"""Verification: decode through the job runner, append the audit events, then release the results."""

from __future__ import annotations

import time

from verifier.audit.service import AuditEvent, AuditUnavailable, record, text_digest
from verifier.auth.dependencies import Principal
from verifier.context import ServiceContext
from verifier.jobs.base import DecodeJob
from verifier.metrics import AUDIT_FAILURES, DISCLOSURES, VERIFY_SECONDS, VERIFY_TEXTS

LEVEL_KEYS = ("level", "key_version", "fields", "confidence", "p_value", "status", "reason")


def _shape(result: dict, max_level: int) -> dict:
    levels = []
    for lv in result["levels"]:
        if lv["level"] > max_level:  # defence in depth: the decoder never had those keys anyway
            continue
        out = {k: lv.get(k) for k in LEVEL_KEYS}
        if out["status"] == "undecodable" and out["fields"] is not None:
            out["fields"] = dict.fromkeys(out["fields"])
        levels.append(out)
    return {
        "watermarked": bool(result["watermarked"]),
        "p_value": float(result["p_value"]),
        "key_version": result["key_version"],
        "tokens_scored": int(result["tokens_scored"]),
        "levels": levels,
    }


def _outcome(r: dict) -> str:
    if r["watermarked"]:
        return "watermarked"
    if r["levels"] and r["levels"][0]["status"] == "undecodable":
        return "undecodable"
    return "not-watermarked"


def verify_texts(ctx: ServiceContext, principal: Principal, texts: list[str], max_level: int) -> list[dict]:
    job = DecodeJob(ctx.profile.name, tuple(texts), max_level, ctx.settings.alpha)
    t0 = time.perf_counter()
    raw = ctx.runner.decode(job)
    VERIFY_SECONDS.observe(time.perf_counter() - t0)
    results = [_shape(r, max_level) for r in raw]
    events = [
        AuditEvent(
            action="verify",
            subject=principal.sub,
            role=principal.role,
            jti=principal.jti,
            levels=[lv["level"] for lv in r["levels"]],
            key_version=",".join(lv["key_version"] or f"l{lv['level']}-none" for lv in r["levels"]) or None,
            text_sha256=text_digest(t),
            outcome=_outcome(r),
        )
        for t, r in zip(texts, results, strict=True)
    ]
    try:
        record(ctx.db, events)  # committed before anything is returned: no audit row, no answer
    except AuditUnavailable:
        AUDIT_FAILURES.inc()
        raise
    DISCLOSURES.labels(principal.role, str(max_level)).inc(len(events))
    for e in events:
        VERIFY_TEXTS.labels(e.outcome).inc()
    return results
