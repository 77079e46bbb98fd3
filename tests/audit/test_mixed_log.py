"""A log of version-1 events (the stored vector, Python json's form) extended by RFC 8785 events verifies as one:
the chain, the Merkle tree, the checkpoint signed over the old events, `hero audit verify` and its `--against`; and
altering an event's canonicalisation marker in the database breaks that event, at its own index."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from tests.audit.helpers import V1, mixed_log, v1_signer
from verifier.audit import merkle
from verifier.audit import transparency as tl
from verifier.audit.chain import row_fields
from verifier.audit.models import AuditEventRow
from verifier.audit.schemas import AuditEventOut, AuditEventsOut
from verifier.audit.service import compute_hash, list_events, verify_chain
from verifier.audit.verification import verify_against


def test_a_log_mixing_both_forms_verifies(db_url):
    db, receipts = mixed_log(db_url)
    try:
        report = verify_chain(db, V1["vkey"])
        assert report.valid and report.events == 6, report
        old_cp = tl.open_checkpoint(V1["receipts"][0]["checkpoint"], V1["vkey"], V1["origin"])
        assert verify_against(db, V1["receipts"][0]["checkpoint"], V1["vkey"], V1["origin"]).valid  # still its prefix
        new_cp = tl.open_checkpoint(receipts[0]["checkpoint"], V1["vkey"], V1["origin"])
        tl.verify_consistency(3, 6, merkle.consistency(db, 3, 6), old_cp.root, new_cp.root)
        events = list_events(db, 0, 100)
    finally:
        db.dispose()
    for receipt in V1["receipts"]:
        assert tl.verify_receipt(receipt, V1["vkey"]).size == 3
    for receipt in receipts:
        assert receipt["version"] == 2 and tl.verify_receipt(receipt, V1["vkey"]).size == 6
    assert [e["canon"] for e in events] == [None, None, None, "jcs", "jcs", "jcs"]


def test_hero_audit_verify_over_a_mixed_log(sqlite_url, hero_home, tmp_path, monkeypatch, capsys):
    from verifier.cli import main

    db, _ = mixed_log(sqlite_url)
    db.dispose()
    key = tmp_path / "checkpoint.key"
    key.write_bytes(v1_signer().key.private_bytes_raw())
    key.chmod(0o600)
    published = tmp_path / "published.checkpoint"
    published.write_text(V1["receipts"][0]["checkpoint"], encoding="utf-8")
    monkeypatch.setenv("HERO_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("HERO_LOG_KEY_FILE", str(key))
    monkeypatch.setenv("HERO_LOG_ORIGIN", V1["origin"])
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert json.loads(capsys.readouterr().out) | {"head_hash": None, "root_hash": None} == {
        "valid": True, "events": 6, "first_broken_index": None, "reason": None, "head_hash": None,
        "root_hash": None, "checkpoint_size": None, "problem": None}
    assert main(["audit", "verify", "--against", str(published)]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint_size"] == 3


def _strip_and_rehash(db, idx: int) -> None:
    """The marker removed and the chain hash recomputed in Python json's form: the chain then holds at `idx` (the
    next event's prev_hash aside), but the Merkle leaf stored at append time does not."""
    with db.session() as s:
        row = s.get(AuditEventRow, idx)
        row.canon = None
        row.hash = compute_hash(row.prev_hash, row_fields(row))


@pytest.mark.parametrize(("sql", "idx", "reason"), [
    ("UPDATE hero_audit_events SET canon = NULL WHERE idx = 5", 5, "does not match its hash"),  # downgrade
    ("UPDATE hero_audit_events SET canon = 'jcs' WHERE idx = 2", 2, "does not match its hash"),  # upgrade
    ("UPDATE hero_audit_events SET canon = 'json' WHERE idx = 4", 4, "unknown canonicalisation"),
    (None, 5, "transparency-log leaf"),
], ids=["strip", "mark-old", "unknown", "strip-and-rehash"])
def test_tampering_with_the_marker_breaks_the_event(db_url, sql, idx, reason):
    db, _ = mixed_log(db_url)
    try:
        assert verify_chain(db, V1["vkey"]).valid
        if sql is None:
            _strip_and_rehash(db, idx)
        else:
            with db.session() as s:
                s.execute(text(sql))
        report = verify_chain(db, V1["vkey"])
    finally:
        db.dispose()
    assert not report.valid and report.first_broken_index == idx and reason in report.reason, report


def test_listed_events_have_the_audit_layers_one_schema(sqlite_url):
    """`/v1/audit/events` serialises `service.event_dict` through `AuditEventOut`, defined once in the audit layer:
    every listed event has exactly its fields, and the model passes them through unchanged."""
    import verifier.api.audit as api

    assert api.AuditEventOut is AuditEventOut and api.AuditEventsOut is AuditEventsOut
    db, _ = mixed_log(sqlite_url)
    try:
        events = list_events(db, 0, 100)
    finally:
        db.dispose()
    assert all(set(e) == set(AuditEventOut.model_fields) for e in events), [sorted(e) for e in events]
    page = {"events": events, "next_after": None}
    assert AuditEventsOut.model_validate(page).model_dump() == page


def test_the_events_endpoint_lists_the_marker(sqlite_url, hero_home):
    from tests.helpers.service import service_factory

    factory = service_factory(hero_home)
    svc = next(factory)(sqlite_url)
    try:
        svc.init_keys()
        r = svc.client.get("/v1/audit/events", headers=svc.auth("auditor"))
        assert r.status_code == 200, r.text
        (event,) = r.json()["events"]
        assert set(event) == set(AuditEventOut.model_fields) and event["canon"] == "jcs", event
        assert event["action"] == "keys.init" and event["levels"] == []
    finally:
        next(factory, None)  # closes the client
