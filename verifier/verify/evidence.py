"""Per-token level-1 evidence for one text (the console's highlight), audited like a disclosure.

Why a separate, restricted call: a map of which tokens carry the mark is a much faster oracle for the
level-1 keys than one p-value per text (an attacker learns, context by context, which tokens the key
favours), so it is an action of its own (`evidence.read`, auditors and admins in the shipped policy),
level 1 only, and each use is an audit event with a receipt. No answer without its audit record.
"""

from __future__ import annotations

from verifier.audit.service import Actor, AuditEvent, record_with_receipts, text_digest
from verifier.audit.signer import LogSigner
from verifier.base.db import Database
from verifier.engine.profile import Profile
from verifier.verify.disclosure import outcome


def token_evidence(runner, db: Database, profile: Profile, text: str, actor: Actor, signer: LogSigner,
                   interval_s: float) -> dict:
    result, tokens = runner.token_evidence(profile, text)
    lv1 = result["levels"][0]
    event = AuditEvent.of(actor, "verify.evidence", [1], lv1["key_version"], text_digest(text), outcome(result),
                          f"{len(tokens)} tokens")
    receipt = record_with_receipts(db, [event], signer, interval_s)[0]
    return {
        "watermarked": result["watermarked"],  # the decode's own verdict (engine/verdicts.text_verdict)
        "p_value": lv1["p_value"],
        "status": lv1["status"],
        "key_version": lv1["key_version"],
        "fields": lv1["fields"],
        "tokens": [{"start": a, "end": b, "evidence": round(e, 4)} for a, b, e in tokens],
        "receipt": receipt,
    }
