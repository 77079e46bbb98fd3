"""The audit log as a transparency log: checkpoints, proofs, and detection of truncation, rewrites and forks
against a checkpoint published earlier (finding 8), on both backends."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from sqlalchemy import text

from verifier.audit import transparency as tl
from verifier.cli import main

TEXT = "The quick brown fox jumps over the lazy dog while the cat watches from the fence."


def _fill(svc, n):
    if not svc.client.get("/v1/keys", headers=svc.auth("admin")).json()["versions"]:
        svc.init_keys()
    h = svc.auth("auditor")
    for i in range(n):
        r = svc.client.post("/v1/verify", headers=h, json={"texts": [f"{TEXT} {i} {time.time()}"]})
        assert r.status_code == 200


def _checkpoint(svc) -> str:
    r = svc.client.get("/v1/audit/checkpoint", headers=svc.auth("moderator", "mod"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


def _exec(svc, sql):
    with svc.ctx.db.session() as s:
        s.execute(text(sql))


def _against(svc, tmp_path, monkeypatch, capsys, note) -> tuple[int, str]:
    path = tmp_path / "published.checkpoint"
    path.write_text(note)
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    capsys.readouterr()
    rc = main(["audit", "verify", "--against", str(path)])
    out = capsys.readouterr()
    return rc, (out.err if rc else out.out)


def test_checkpoint_is_a_signed_note_over_the_events(svc):
    _fill(svc, 3)
    note = _checkpoint(svc)
    vkey = svc.client.get("/v1/audit/public-key", headers=svc.auth("moderator", "m")).text.strip()
    assert vkey == svc.ctx.signer.vkey
    cp = tl.open_checkpoint(note, vkey, svc.settings.log_origin)
    assert cp.size == 4  # keys.init + 3 verifications
    events = svc.client.get("/v1/audit/events", headers=svc.auth("auditor")).json()["events"]
    fields = [{k: v for k, v in e.items() if k not in ("prev_hash", "hash")} for e in events]
    for f in fields:
        f["levels"] = ",".join(str(x) for x in f["levels"])
    assert tl.root_of(tl.event_leaf(f) for f in fields) == (4, cp.root)


def test_consistency_proofs_between_checkpoints(svc):
    _fill(svc, 2)
    old = tl.open_checkpoint(_checkpoint(svc), svc.ctx.signer.vkey)
    _fill(svc, 5)
    new = tl.open_checkpoint(_checkpoint(svc), svc.ctx.signer.vkey)
    r = svc.client.get(f"/v1/audit/consistency?first={old.size}&second={new.size}", headers=svc.auth("moderator"))
    assert r.status_code == 200, r.text
    proof = [base64.b64decode(p) for p in r.json()["proof"]]
    tl.verify_consistency(old.size, new.size, proof, old.root, new.root)
    assert svc.client.get("/v1/audit/consistency?first=1&second=99", headers=svc.auth("moderator")).status_code == 404


def test_truncating_the_last_row_is_detected_against_an_earlier_checkpoint(svc, tmp_path, monkeypatch, capsys):
    _fill(svc, 3)
    note = _checkpoint(svc)
    assert _against(svc, tmp_path, monkeypatch, capsys, note)[0] == 0
    _exec(svc, "DELETE FROM hero_audit_events WHERE idx = 4")
    _exec(svc, "DELETE FROM hero_audit_tree")  # a careful attacker removes the tree and checkpoints too
    _exec(svc, "DELETE FROM hero_audit_checkpoints")
    rc, line = _against(svc, tmp_path, monkeypatch, capsys, note)
    assert rc == 1 and line.count("\n") == 1 and "truncated" in line and "3 events" in line


def test_deleting_every_row_is_detected(svc, tmp_path, monkeypatch, capsys):
    _fill(svc, 2)
    note = _checkpoint(svc)
    for table in ("hero_audit_events", "hero_audit_tree", "hero_audit_checkpoints"):
        _exec(svc, f"DELETE FROM {table}")
    rc, line = _against(svc, tmp_path, monkeypatch, capsys, note)
    assert rc == 1 and "truncated" in line and "0 events" in line


def test_tail_rewritten_with_recomputed_hashes_is_detected(svc, tmp_path, monkeypatch, capsys):
    from verifier.audit.models import AuditEventRow
    from verifier.audit.service import compute_hash, row_fields

    _fill(svc, 3)
    note = _checkpoint(svc)
    with svc.ctx.db.session() as s:  # rewrite event 4 and keep the plain hash chain perfectly valid
        row = s.get(AuditEventRow, 4)
        row.outcome = "not-watermarked" if row.outcome != "not-watermarked" else "watermarked"
        row.hash = compute_hash(row.prev_hash, row_fields(row))
        s.execute(text("DELETE FROM hero_audit_tree"))
        s.execute(text("DELETE FROM hero_audit_checkpoints"))
    rc, line = _against(svc, tmp_path, monkeypatch, capsys, note)
    assert rc == 1 and "rewritten" in line


def test_fork_two_signed_histories_is_detected(svc, tmp_path, monkeypatch, capsys):
    """The operator (holding the signing key) re-signs a different history of events that were published."""
    from verifier.audit import merkle
    from verifier.audit.models import AuditEventRow
    from verifier.audit.service import compute_hash, row_fields

    _fill(svc, 3)
    note = _checkpoint(svc)
    with svc.ctx.db.session() as s:
        row = s.get(AuditEventRow, 4)
        row.subject = "somebody-else"
        row.hash = compute_hash(row.prev_hash, row_fields(row))
        s.execute(text("DELETE FROM hero_audit_tree"))
        s.execute(text("DELETE FROM hero_audit_checkpoints"))
        s.flush()
        rows = list(s.query(AuditEventRow).order_by(AuditEventRow.idx))
        merkle.extend(s, rows)
        merkle.store(s, svc.ctx.signer, 4)
    rc, line = _against(svc, tmp_path, monkeypatch, capsys, note)
    assert rc == 1 and "forked" in line


def test_checkpoint_from_another_key_is_rejected(svc, tmp_path, monkeypatch, capsys):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    _fill(svc, 1)
    forged = tl.sign_note(tl.Checkpoint(svc.settings.log_origin, 2, bytes(32)).body(), svc.settings.log_origin,
                          Ed25519PrivateKey.generate())
    rc, line = _against(svc, tmp_path, monkeypatch, capsys, forged)
    assert rc == 1 and "checkpoint rejected" in line


def test_stored_checkpoint_reveals_truncation_without_a_file(svc):
    _fill(svc, 3)
    _checkpoint(svc)  # stored
    _exec(svc, "DELETE FROM hero_audit_events WHERE idx = 4")
    rep = svc.client.get("/v1/audit/verify", headers=svc.auth("auditor")).json()
    assert not rep["valid"] and rep["problem"] == "truncated" and rep["first_broken_index"] == 4


def test_rows_with_non_positive_index_are_reported(svc):
    _fill(svc, 2)
    _exec(svc, "UPDATE hero_audit_events SET idx = 0 WHERE idx = 1")
    rep = svc.client.get("/v1/audit/verify", headers=svc.auth("auditor")).json()
    assert not rep["valid"] and rep["first_broken_index"] == 1 and "invalid index 0" in rep["reason"]


def test_cli_checkpoint_prints_the_latest_signed_checkpoint(svc, monkeypatch, capsys):
    _fill(svc, 2)
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    capsys.readouterr()
    assert main(["audit", "checkpoint"]) == 0
    note = capsys.readouterr().out
    assert tl.open_checkpoint(note, svc.ctx.signer.vkey).size == 3
    assert main(["audit", "public-key"]) == 0
    assert capsys.readouterr().out.strip() == svc.ctx.signer.vkey


def test_audit_verify_reads_a_snapshot_and_never_blocks_writers(lite, monkeypatch):
    """Finding 6: the walk used to hold the SQLite write lock for its whole duration."""
    from verifier.audit import verification

    _fill(lite, 3)
    paused, resume = threading.Event(), threading.Event()
    real_walk = verification._walk

    def slow_walk(s, sizes):
        s.execute(text("SELECT count(*) FROM hero_audit_events")).scalar()  # the snapshot is taken here
        paused.set()
        resume.wait(600)
        return real_walk(s, sizes)

    monkeypatch.setattr(verification, "_walk", slow_walk)
    report = {}
    walker = threading.Thread(target=lambda: report.update(verification.verify_chain(lite.ctx.db).to_dict()))
    walker.start()
    try:
        assert paused.wait(300)
        out: dict = {}
        req = threading.Thread(target=lambda: out.update(r=lite.client.post(
            "/v1/verify", headers=lite.auth("auditor"), json={"texts": [TEXT]})))
        req.start()
        req.join(300)  # a bound for a loaded machine: a verify that waited for the walk would wait till resume
        assert not req.is_alive() and walker.is_alive() and not resume.is_set()  # answered while the walk holds
        assert out["r"].status_code == 200, out["r"].text
    finally:
        resume.set()
        walker.join(300)
    assert report["valid"] and report["events"] == 4  # the snapshot predates the concurrent write


@pytest.mark.parametrize("path", ["/v1/verify"])
def test_database_lock_errors_are_503(lite, monkeypatch, path):
    from sqlalchemy.exc import OperationalError

    lite.init_keys()

    def locked(*a, **k):
        raise OperationalError("SELECT 1", {}, Exception("database is locked"))

    monkeypatch.setattr(lite.ctx.store, "verification_material", locked)
    r = lite.client.post(path, headers=lite.auth("auditor"), json={"texts": [TEXT]})
    assert r.status_code == 503 and "busy" in r.json()["detail"] and r.headers.get("retry-after")


def test_migration_adds_existing_events_to_the_tree(db_url):
    from verifier.audit.models import AuditEventRow
    from verifier.audit.service import GENESIS, compute_hash, row_fields
    from verifier.audit.verification import verify_chain
    from verifier.base.db import Database, upgrade

    upgrade(db_url, "0002")
    db = Database(db_url)
    prev, leaves = GENESIS, []
    with db.session() as s:
        for i in range(1, 8):
            row = AuditEventRow(idx=i, created_at="2026-01-01T00:00:00+00:00", action="verify", subject="a", role="r",
                                jti=f"j{i}", levels="1", key_version="l1-v1", text_sha256=None, outcome="ok",
                                detail=None, prev_hash=prev, hash="")
            row.hash = compute_hash(prev, row_fields(row))
            prev = row.hash
            leaves.append(tl.event_leaf(row_fields(row)))
            s.execute(AuditEventRow.__table__.insert().values(**row_fields(row), prev_hash=row.prev_hash,
                                                               hash=row.hash))
    upgrade(db_url)
    rep = verify_chain(db)
    assert rep.valid and rep.events == 7 and rep.root_hash == tl.root_of(leaves)[1].hex()
    db.dispose()
