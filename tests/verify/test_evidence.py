"""POST /v1/verify/evidence: per-token level-1 evidence, for trusted roles only, audited, fail closed."""

from __future__ import annotations

import numpy as np

from tests.helpers.workers import make_texts

UNMARKED = "An ordinary sentence that nobody watermarked, long enough to be scored by the detector, and more."


def _evidence(svc, role, text):
    return svc.client.post("/v1/verify/evidence", headers=svc.auth(role, f"{role}-1"), json={"text": text})


def test_auditor_gets_token_evidence_that_points_at_the_mark(svc):
    svc.init_keys()
    text = make_texts(svc, 1, steps=200, seed=4)[0]
    r = _evidence(svc, "auditor", text)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "decoded" and body["watermarked"] and body["key_version"] == "l1-v1"
    assert set(body["fields"]) == {"model"} and "user" not in r.text  # level 1 only, whatever the role
    toks = body["tokens"]
    assert len(toks) > 100
    starts = [t["start"] for t in toks]
    assert starts == sorted(starts) and all(0 <= t["start"] < t["end"] <= len(text) for t in toks)
    assert np.mean([t["evidence"] for t in toks]) > 1.5  # Exp(1), mean 1, without the mark
    # The same text scored by /v1/verify at level 1 names the same value.
    v = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json={"texts": [text]}).json()["results"][0]
    assert v["levels"][0]["fields"] == body["fields"]
    # Audited as its own action, with a receipt for this event.
    events = svc.client.get("/v1/audit/events?action=verify.evidence", headers=svc.auth("admin")).json()["events"]
    assert [(e["subject"], e["role"], e["levels"]) for e in events] == [("auditor-1", "auditor", [1])]
    assert body["receipt"]["event"]["action"] == "verify.evidence"


def test_unmarked_text_gets_no_map_and_moderators_none_at_all(lite):
    lite.init_keys()
    r = _evidence(lite, "auditor", UNMARKED)
    assert r.status_code == 200 and r.json()["tokens"] == [] and r.json()["status"] == "absent"
    assert r.json()["fields"] == {"model": None}
    # The map is a key oracle: moderators (no `evidence.read`) get 403 before any work.
    assert _evidence(lite, "moderator", UNMARKED).status_code == 403
    assert lite.client.post("/v1/verify/evidence", json={"text": UNMARKED}).status_code == 401
    assert _evidence(lite, "auditor", "").status_code == 422
    wrong = lite.client.post("/v1/verify/evidence", headers=lite.auth("auditor"), json={"texts": ["x"]})
    assert wrong.status_code == 422


def test_no_map_without_its_audit_record(lite, monkeypatch):
    import verifier.verify.evidence as ev
    from verifier.audit.service import AuditUnavailable

    lite.init_keys()
    text = make_texts(lite, 1, steps=120, seed=5)[0]

    def fail(*a, **k):
        raise AuditUnavailable("audit log unavailable (test)")

    monkeypatch.setattr(ev, "record_with_receipts", fail)
    r = _evidence(lite, "auditor", text)
    assert r.status_code == 503 and "tokens" not in r.text
