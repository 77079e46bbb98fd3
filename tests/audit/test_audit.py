"""Hash-chained audit log: tamper detection at the right index, concurrency, fail-closed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from verifier.audit.service import AuditUnavailable, verify_chain

TEXT = "The quick brown fox jumps over the lazy dog while the cat watches from the fence."


def _fill(svc, n=5):
    svc.init_keys()  # event 1
    h = svc.auth("auditor")
    for i in range(n - 1):
        r = svc.client.post("/v1/verify", headers=h, json={"texts": [f"{TEXT} {i}"]})
        assert r.status_code == 200, r.text
    rep = svc.client.get("/v1/audit/verify", headers=h).json()
    assert rep == {**rep, "valid": True, "events": n, "first_broken_index": None}


def _exec(svc, sql, **params):
    with svc.ctx.db.session() as s:
        s.execute(text(sql), params)


def _report(svc):
    r = svc.client.get("/v1/audit/verify", headers=svc.auth("admin"))
    assert r.status_code == 200
    return r.json()


def test_edit_is_detected_at_its_index(svc):
    _fill(svc)
    _exec(svc, "UPDATE hero_audit_events SET outcome = 'watermarked' WHERE idx = 3")
    rep = _report(svc)
    assert not rep["valid"] and rep["first_broken_index"] == 3
    assert "hash" in rep["reason"]


def test_edit_with_recomputed_hash_is_detected_at_its_index_by_the_tree(svc):
    # The chain alone would only notice at event 3 (prev_hash); the Merkle leaf kept at append time pins event 2.
    from verifier.audit.service import compute_hash, row_fields

    _fill(svc)
    from verifier.audit.models import AuditEventRow

    with svc.ctx.db.session() as s:
        row = s.get(AuditEventRow, 2)
        row.subject = "someone-else"
        row.hash = compute_hash(row.prev_hash, row_fields(row))
    rep = _report(svc)
    assert not rep["valid"] and rep["first_broken_index"] == 2


def test_delete_is_detected_at_its_index(svc):
    _fill(svc)
    _exec(svc, "DELETE FROM hero_audit_events WHERE idx = 4")
    rep = _report(svc)
    assert not rep["valid"] and rep["first_broken_index"] == 4


def test_reorder_is_detected(svc):
    _fill(svc)
    _exec(svc, "UPDATE hero_audit_events SET idx = -1 WHERE idx = 2")
    _exec(svc, "UPDATE hero_audit_events SET idx = 2 WHERE idx = 3")
    _exec(svc, "UPDATE hero_audit_events SET idx = 3 WHERE idx = -1")
    rep = _report(svc)
    assert not rep["valid"] and rep["first_broken_index"] == 2


def test_cli_audit_verify_reports_index(svc, monkeypatch, capsys):
    import json

    from verifier.cli import main

    _fill(svc)
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    assert main(["audit", "verify"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    _exec(svc, "UPDATE hero_audit_events SET jti = 'x' WHERE idx = 2")
    assert main(["audit", "verify"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["first_broken_index"] == 2


def test_fifty_concurrent_verifications_keep_a_valid_chain(svc):
    svc.init_keys()
    tokens = {role: svc.auth(role, f"{role}-c") for role in ("moderator", "auditor", "admin")}
    roles = list(tokens)

    def one(i):
        r = svc.client.post("/v1/verify", headers=tokens[roles[i % 3]], json={"texts": [f"{TEXT} number {i}"]})
        return r.status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        codes = list(pool.map(one, range(50)))
    assert codes == [200] * 50
    rep = verify_chain(svc.ctx.db)
    assert rep.valid and rep.events == 51
    events = svc.client.get("/v1/audit/events?limit=1000", headers=svc.auth("auditor")).json()["events"]
    assert [e["idx"] for e in events] == list(range(1, 52))
    assert sum(e["action"] == "verify" for e in events) == 50


def test_events_pagination(svc):
    _fill(svc, 4)
    h = svc.auth("auditor")
    page = svc.client.get("/v1/audit/events?after=0&limit=2", headers=h).json()
    assert [e["idx"] for e in page["events"]] == [1, 2] and page["next_after"] == 2
    page = svc.client.get("/v1/audit/events?after=2&limit=2", headers=h).json()
    assert [e["idx"] for e in page["events"]] == [3, 4]
    ev = page["events"][0]
    assert ev["action"] == "verify" and ev["role"] == "auditor" and ev["levels"] == [1, 2]
    assert len(ev["text_sha256"]) == 64 and ev["key_version"] is None  # plain text names no version


def test_fail_closed_when_audit_append_fails(lite, monkeypatch):
    lite.init_keys()

    def boom(db, prepare, *a, **kw):
        raise AuditUnavailable("audit log unavailable (OperationalError)")

    monkeypatch.setattr("verifier.verify.service.record_prepared", boom)  # the one append of a verify batch
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": [TEXT]})
    assert r.status_code == 503
    assert "results" not in r.json() and "audit" in r.json()["detail"]


def test_fail_closed_when_audit_table_is_gone(lite):
    lite.init_keys()
    _exec(lite, "DROP TABLE hero_audit_events")
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": [TEXT]})
    assert r.status_code == 503
    assert set(r.json()) == {"detail"}


@pytest.mark.parametrize("role", ["auditor", "admin"])
def test_audit_roles(lite, role):
    assert lite.client.get("/v1/audit/events", headers=lite.auth(role)).status_code == 200


def test_key_changes_commit_with_their_audit_event_or_not_at_all(svc):
    """Key administration and its audit row are one transaction: no audit row, no change."""
    svc.init_keys()
    admin = svc.auth("admin")
    assert svc.client.post("/v1/keys/1/rotate", headers=admin).status_code == 201
    events = svc.client.get("/v1/audit/events", headers=admin).json()["events"]
    assert [(e["action"], e["levels"], e["key_version"]) for e in events] == [
        ("keys.init", [], None), ("keys.rotate", [1], "l1-v2")]

    _exec(svc, "DROP TABLE hero_audit_events")
    for path, body in [("/v1/keys/2/rotate", None), ("/v1/keys/1/versions/l1-v1/disable", None),
                       ("/v1/keys/1/versions/l1-v1/destroy", {"confirm": "l1-v1"})]:
        r = svc.client.post(path, headers=admin, json=body)
        assert r.status_code == 503 and "audit" in r.json()["detail"], (path, r.text)
    status = {r.version: r.status for r in svc.ctx.store.version_rows(svc.ctx.profile)}
    assert status == {"l1-v1": "verify-only", "l1-v2": "active", "l2-v1": "active"}  # nothing changed
