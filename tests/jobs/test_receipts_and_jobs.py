"""Findings 3, 7, 12 and the receipts: job ownership (issuer, subject, role) with the reader's level covering
the job's, the owner check before anything is loaded, audited job reads, receipts checked by a standalone
verifier with no database, and CLI actions audited (OS user, role `cli`) in the transaction of the change."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time

import pytest

from tests.helpers.workers import make_texts

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored by the detector."


def _events(svc, action=None):
    evs = svc.client.get("/v1/audit/events?limit=1000", headers=svc.auth("admin", "root")).json()["events"]
    return [e for e in evs if action is None or e["action"] == action]


STANDALONE = r"""
import json, sys
from verifier.audit.transparency import verify_receipt
data = json.load(sys.stdin)
cp = verify_receipt(data["receipt"], data["vkey"], origin=data["origin"], text=data["text"])
heavy = [m for m in ("sqlalchemy", "fastapi", "starlette", "verifier.base.db", "verifier.audit.service")
         if m in sys.modules]
print(json.dumps({"size": cp.size, "heavy": heavy}))
"""


def _standalone(receipt, vkey, origin, text) -> dict:
    """Checks a receipt in a fresh interpreter that is given nothing but the receipt, the key and the text."""
    r = subprocess.run([sys.executable, "-c", STANDALONE], input=json.dumps(
        {"receipt": receipt, "vkey": vkey, "origin": origin, "text": text}), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_every_verify_result_carries_a_receipt_checkable_offline(svc):
    svc.init_keys()
    vkey = svc.client.get("/v1/audit/public-key", headers=svc.auth("moderator", "m")).text.strip()
    texts = [TEXT, TEXT + " Another one."]
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor", "ann"), json={"texts": texts})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    for text, res in zip(texts, results, strict=True):
        out = _standalone(res["receipt"], vkey, svc.settings.log_origin, text)
        assert out["heavy"] == [] and out["size"] >= 3
        assert res["receipt"]["event"]["subject"] == "ann" and res["receipt"]["event"]["action"] == "verify"
    # The receipt does not vouch for another text, nor under another log key.
    from verifier.audit.transparency import TransparencyError, verify_receipt

    with pytest.raises(TransparencyError):
        verify_receipt(results[0]["receipt"], vkey, text=texts[1])
    # `levels` is a list as in /v1/audit/events; a receipt of the earlier form (the stored string) still verifies,
    # and the list cannot claim other levels than were hashed.
    receipt = results[0]["receipt"]
    listed = _events(svc, "verify")[0]["levels"]
    assert receipt["event"]["levels"] == listed == [1, 2], receipt["event"]
    verify_receipt({**receipt, "event": {**receipt["event"], "levels": "1,2"}}, vkey, text=texts[0])
    for forged in ([1], [2, 1], "1", ["1", "2"]):
        with pytest.raises(TransparencyError):
            verify_receipt({**receipt, "event": {**receipt["event"], "levels": forged}}, vkey, text=texts[0])
    # Receipts stay valid as the log grows: a consistency proof links their checkpoint to a later one.
    svc.client.post("/v1/verify", headers=svc.auth("auditor", "ann"), json={"texts": [TEXT + " later"]})
    from verifier.audit import transparency as tl

    old = tl.open_checkpoint(results[0]["receipt"]["checkpoint"], vkey)
    new = tl.open_checkpoint(svc.client.get("/v1/audit/checkpoint", headers=svc.auth("auditor")).text, vkey)
    proof = svc.client.get(f"/v1/audit/consistency?first={old.size}&second={new.size}",
                           headers=svc.auth("auditor")).json()["proof"]
    import base64

    tl.verify_consistency(old.size, new.size, [base64.b64decode(p) for p in proof], old.root, new.root)


def _done_job(svc, role, sub, texts):
    r = svc.client.post("/v1/jobs", headers=svc.auth(role, sub), json={"texts": texts})
    assert r.status_code == 202, r.text
    jid = r.json()["job_id"]
    deadline = time.time() + 600  # polled: a bound for a loaded machine, not a speed target
    while True:
        doc = svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth(role, sub)).json()
        if doc["status"] == "done":
            return jid, doc
        assert doc["status"] != "failed" and time.time() < deadline, doc
        time.sleep(0.2)


def test_job_ownership_is_issuer_subject_and_role_and_level(svc):
    svc.init_keys()
    texts = make_texts(svc, 2, steps=40)
    jid, doc = _done_job(svc, "auditor", "carol", texts)
    assert doc["results"] and "user" in doc["results"][0]["levels"][1]["fields"]
    # Finding 3: a moderator token carrying the auditor's `sub` used to read the level-2 `user` field.
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("moderator", "carol")).status_code == 404
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("auditor", "dave")).status_code == 404
    other_issuer = svc.token("auditor", "carol", iss="https://other-idp.example")
    r = svc.client.get(f"/v1/jobs/{jid}", headers={"Authorization": f"Bearer {other_issuer}"})
    assert r.status_code in (401, 404)  # another issuer is never the owner (and is not trusted here at all)
    assert svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth("admin", "root")).status_code == 200


def test_reader_level_must_cover_the_job_level_even_with_read_all():
    from verifier.auth.principal import Principal
    from verifier.jobs.service import may_read

    admin_l1 = Principal("root", "admin", "j", 1, frozenset({"verify", "jobs.read_all"}), "hero-dev")
    assert not may_read(("hero-dev", "carol", "auditor", 2), admin_l1)
    assert may_read(("hero-dev", "carol", "auditor", 1), admin_l1)
    owner = Principal("carol", "auditor", "j", 2, frozenset({"verify"}), "hero-dev")
    assert may_read(("hero-dev", "carol", "auditor", 2), owner)
    assert not may_read(("other-iss", "carol", "auditor", 2), owner)


def test_every_job_result_read_is_audited_with_a_receipt(svc):
    svc.init_keys()
    jid, doc = _done_job(svc, "auditor", "carol", make_texts(svc, 2, steps=40))
    vkey = svc.ctx.signer.vkey
    from verifier.audit.transparency import verify_receipt

    assert verify_receipt(doc["receipt"], vkey).size >= 1
    before = len(_events(svc, "jobs.read"))
    for role, sub in (("auditor", "carol"), ("admin", "root")):
        r = svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth(role, sub))
        assert r.status_code == 200
        assert r.json()["receipt"]["event"]["subject"] == sub and r.json()["receipt"]["event"]["action"] == "jobs.read"
    reads = _events(svc, "jobs.read")
    assert len(reads) == before + 2 and [e["subject"] for e in reads[-2:]] == ["carol", "root"]
    assert reads[-1]["levels"] == [1, 2] and jid in reads[-1]["detail"]


def test_job_read_fails_closed_without_its_audit_event(lite, monkeypatch):
    from verifier.audit.service import AuditUnavailable

    lite.init_keys()
    jid, _ = _done_job(lite, "auditor", "carol", make_texts(lite, 1, steps=40))

    def broken(s, events):
        raise AuditUnavailable("audit log unavailable (OperationalError)")

    monkeypatch.setattr("verifier.jobs.service.append_or_fail", broken)
    r = lite.client.get(f"/v1/jobs/{jid}", headers=lite.auth("auditor", "carol"))
    assert r.status_code == 503 and "results" not in r.json()


def test_owner_check_comes_before_loading_anything(lite, monkeypatch):
    """Finding 12: results were loaded before the owner check, so timing told existing job ids apart."""
    from verifier.jobs import repository

    lite.init_keys()
    jid, _ = _done_job(lite, "auditor", "carol", make_texts(lite, 1, steps=40))
    loads = []
    real = repository.results_in_order
    monkeypatch.setattr(repository, "results_in_order", lambda s, j: loads.append(j) or real(s, j))
    assert lite.client.get(f"/v1/jobs/{jid}", headers=lite.auth("auditor", "mallory")).status_code == 404
    assert lite.client.get(f"/v1/jobs/{jid}", headers=lite.auth("moderator", "carol")).status_code == 404
    assert loads == []
    assert lite.client.get(f"/v1/jobs/{jid}", headers=lite.auth("auditor", "carol")).status_code == 200
    assert loads == [jid]


def _cli(monkeypatch, capsys, url, *argv) -> tuple[int, str, str]:
    from verifier.cli import main

    monkeypatch.setenv("HERO_DATABASE_URL", url)
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_actions_are_audited_as_the_os_user(db_url, make_service, monkeypatch, capsys):
    """Finding 7: CLI key changes, KEK rotation and private decodes left no audit event."""
    svc = make_service(db_url)
    me = getpass.getuser()
    assert _cli(monkeypatch, capsys, db_url, "keys", "init")[0] == 0
    assert _cli(monkeypatch, capsys, db_url, "keys", "rotate", "--level", "1")[0] == 0
    assert _cli(monkeypatch, capsys, db_url, "keys", "disable", "--level", "1", "--version", "l1-v1")[0] == 0
    assert _cli(monkeypatch, capsys, db_url, "keys", "enable", "--level", "1", "--version", "l1-v1")[0] == 0
    rc, _, err = _cli(monkeypatch, capsys, db_url, "keys", "destroy", "--level", "1", "--version", "l1-v1",
                      "--confirm", "l1-v1")
    assert rc == 0, err
    assert _cli(monkeypatch, capsys, db_url, "kek", "rotate")[0] == 0
    rc, out, err = _cli(monkeypatch, capsys, db_url, "decode", "--levels", "1,2", "--text", TEXT)
    assert rc == 0, err
    assert "user" in json.loads(out)["levels"][1]["fields"]  # a private field was printed...
    events = _events(svc)
    cli = [e for e in events if e["role"] == "cli"]
    # A destroy re-keys (a new KEK, the old ones retired), audited as a KEK rotation.
    assert [e["action"] for e in cli] == ["keys.init", "keys.rotate", "keys.disable", "keys.enable", "keys.destroy",
                                         "kek.rotate", "kek.rotate", "decode"]
    assert {e["subject"] for e in cli} == {me}
    decode = cli[-1]
    assert decode["levels"] == [1, 2] and len(decode["text_sha256"]) == 64  # ...and it is on the record
    assert svc.client.get("/v1/audit/verify", headers=svc.auth("auditor")).json()["valid"]


def test_cli_change_and_its_audit_event_commit_together(lite, monkeypatch, capsys):
    from verifier.audit.service import AuditUnavailable

    url = lite.settings.db_url
    assert _cli(monkeypatch, capsys, url, "keys", "init")[0] == 0

    def broken(s, events):
        raise AuditUnavailable("audit log unavailable (OperationalError)")

    monkeypatch.setattr("verifier.keys.service.append_or_fail", broken)
    rc, _, err = _cli(monkeypatch, capsys, url, "keys", "rotate", "--level", "1")
    assert rc == 2 and "audit log unavailable" in err and err.count("\n") == 1
    versions = [v["version"] for v in lite.client.get("/v1/keys", headers=lite.auth("admin")).json()["versions"]]
    assert "l1-v2" not in versions  # no audit event, no change

    monkeypatch.setattr("verifier.audit.service.record", lambda db, ev: (_ for _ in ()).throw(
        AuditUnavailable("audit log unavailable (OperationalError)")))
    rc, out, err = _cli(monkeypatch, capsys, url, "decode", "--levels", "1,2", "--text", TEXT)
    assert rc == 2 and out == ""  # nothing printed without its audit event
