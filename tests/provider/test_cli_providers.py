"""`hero providers add | list | revoke` (audited as the OS user, role cli) and the provider dev token."""

from __future__ import annotations

import base64
import json

from verifier.cli import main
from verifier.provider import generate_keypair


def run(capsys, *argv: str):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_providers_add_list_revoke(capsys, hero_home):
    _, pk = generate_keypair()
    b64 = base64.b64encode(pk).decode()
    code, out, _ = run(capsys, "providers", "add", "--id", "acme", "--public-key", b64)
    assert code == 0 and out["provider_id"] == "acme" and out["public_key"] == b64 and out["status"] == "active"
    code, _, err = run(capsys, "providers", "add", "--id", "acme", "--public-key", b64)
    assert code == 2 and "already registered" in err and "Traceback" not in err
    code, _, err = run(capsys, "providers", "add", "--id", "bad", "--public-key", "AAAA")
    assert code == 2 and err.startswith("hero: error:") and "32-byte" in err
    code, _, err = run(capsys, "providers", "add", "--id", "p2", "--public-key", b64, "--expires-at", "soon")
    assert code == 2 and "ISO-8601" in err
    code, out, _ = run(capsys, "providers", "add", "--id", "p2", "--public-key", b64,
                       "--expires-at", "2099-01-01T00:00:00Z")
    assert code == 0 and out["expires_at"].startswith("2099-01-01")
    code, out, _ = run(capsys, "providers", "list")
    assert [p["provider_id"] for p in out["providers"]] == ["acme", "p2"]
    code, out, _ = run(capsys, "providers", "revoke", "--id", "acme")
    assert code == 0 and out["status"] == "revoked"
    code, _, err = run(capsys, "providers", "revoke", "--id", "nobody")
    assert code == 2 and "no provider" in err
    # every change is in the audit chain, as the OS user with role cli
    from verifier.audit.service import list_events
    from verifier.cli.common import open_database

    events = [e for e in list_events(open_database(), 0, 100) if e["action"].startswith("providers.")]
    assert [e["action"] for e in events] == ["providers.add", "providers.add", "providers.revoke"]
    assert {e["role"] for e in events} == {"cli"}


def test_dev_token_knows_the_provider_role(capsys, monkeypatch):
    monkeypatch.setenv("HERO_DEV_MODE", "1")
    code = main(["token", "--role", "provider", "--sub", "acme"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.count(".") == 2
    import jwt

    assert jwt.decode(out.strip(), options={"verify_signature": False})["role"] == "provider"
