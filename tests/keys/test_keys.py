"""Keys at rest: envelope encryption, AD binding, KEK rotation, lifecycle, least privilege, no leaks."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.helpers.service import secret_forms
from verifier.keys.errors import KeyStoreError
from verifier.keys.kek import KekError
from verifier.keys.models import KeyVersionRow


def _rows(svc) -> list[KeyVersionRow]:
    return svc.ctx.store.version_rows(svc.ctx.profile)


def db_dump(svc) -> bytes:
    chunks = []
    with svc.ctx.db.engine.connect() as c:
        for table in ("hero_key_versions", "hero_audit_events"):
            for row in c.execute(text(f"SELECT * FROM {table}")):
                for v in row:
                    chunks.append(bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode())
    if svc.ctx.db.dialect == "sqlite":
        path = svc.ctx.db.engine.url.database
        for suffix in ("", "-wal"):
            try:
                chunks.append(open(path + suffix, "rb").read())
            except FileNotFoundError:
                pass
    return b"\n".join(chunks)


def test_versions_and_lifecycle(svc):
    svc.init_keys()
    admin = svc.auth("admin")
    assert svc.client.post("/v1/keys/init", headers=admin).status_code == 409
    r = svc.client.post("/v1/keys/1/rotate", headers=admin)
    assert r.status_code == 201 and r.json()["version"] == "l1-v2" and r.json()["status"] == "active"
    assert svc.client.post("/v1/keys/1/rotate", headers=admin).json()["version"] == "l1-v3"
    listing = svc.client.get("/v1/keys", headers=admin).json()
    st = {v["version"]: v["status"] for v in listing["versions"]}
    assert st == {"l1-v1": "verify-only", "l1-v2": "verify-only", "l1-v3": "active", "l2-v1": "active"}
    # Active versions can be neither disabled nor destroyed; unknown ones are 404; bad levels 404/422.
    assert svc.client.post("/v1/keys/1/versions/l1-v3/disable", headers=admin).status_code == 409
    r = svc.client.post("/v1/keys/1/versions/l1-v3/destroy", headers=admin, json={"confirm": "l1-v3"})
    assert r.status_code == 409
    assert svc.client.post("/v1/keys/1/versions/l1-v9/disable", headers=admin).status_code == 404
    assert svc.client.post("/v1/keys/2/versions/l1-v1/disable", headers=admin).status_code == 404
    assert svc.client.post("/v1/keys/3/rotate", headers=admin).status_code == 404
    assert svc.client.post("/v1/keys/0/rotate", headers=admin).status_code == 422
    assert svc.client.post("/v1/keys/1/versions/DROP/disable", headers=admin).status_code == 422
    r = svc.client.post("/v1/keys/1/versions/l1-v2/disable", headers=admin)
    assert r.status_code == 200 and r.json()["status"] == "disabled"
    r = svc.client.post("/v1/keys/1/versions/l1-v1/destroy", headers=admin, json={"confirm": "l1-v1"})
    assert r.status_code == 200 and r.json()["status"] == "destroyed" and r.json()["destroyed_at"]
    # The row keeps metadata only.
    row = next(x for x in _rows(svc) if x.version == "l1-v1")
    assert row.ciphertext is None and row.wrapped_dek is None and row.nonce is None and row.kek_id is None
    # Tables handed to decoders: usable versions only, with reasons for the others.
    mat = svc.ctx.store.verification_material(svc.ctx.profile, 2)
    assert [t.version for t in mat.tables[1]] == ["l1-v3"]
    assert "l1-v1 destroyed on" in mat.unavailable[1] and "l1-v2 disabled" in mat.not_tried[1]
    # Responses are metadata only.
    for v in listing["versions"]:
        assert set(v) == {"profile", "level", "version", "status", "created_at", "status_changed_at",
                          "destroyed_at", "kek_id", "tokenizer_fingerprint", "profile_digest"}


def test_destroy_requires_confirmation_in_store(lite):
    lite.init_keys()
    store, prof = lite.ctx.store, lite.ctx.profile
    store.rotate(prof, 2)
    with pytest.raises(KeyStoreError):
        store.destroy(prof, 2, "l2-v1", confirm=None)
    with pytest.raises(KeyStoreError):
        store.destroy(prof, 2, "l2-v1", confirm="yes")
    assert store.destroy(prof, 2, "l2-v1", confirm="l2-v1").status == "destroyed"


def test_level_with_only_destroyed_versions_reports_why(lite):
    lite.init_keys()
    store, prof = lite.ctx.store, lite.ctx.profile
    store.rotate(prof, 2)
    # Make l2-v2 unusable too: only destroyed/disabled versions remain at level 2.
    store.destroy(prof, 2, "l2-v1", confirm="l2-v1")
    with lite.ctx.db.session() as s:
        s.execute(text("UPDATE hero_key_versions SET status='disabled' WHERE version='l2-v2'"))
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": ["some ordinary text to check"]})
    assert r.status_code == 200, r.text
    l2 = r.json()["results"][0]["levels"][1]
    assert l2["status"] == "undecodable" and "l2-v1 destroyed" in l2["reason"] and l2["fields"] is None


def test_no_key_material_in_db_dump(svc):
    svc.init_keys()
    svc.client.post("/v1/keys/1/rotate", headers=svc.auth("admin"))
    svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": ["a text to verify, nothing more"]})
    dump = db_dump(svc)
    forms = secret_forms(svc)
    assert len(forms) > 20
    for f in forms:
        assert f not in dump
    # ... but the ciphertext is there.
    assert all(r.ciphertext and r.ciphertext in dump for r in _rows(svc))


def test_rows_cannot_be_swapped(svc):
    svc.init_keys()
    with svc.ctx.db.session() as s:
        rows = {r.version: r for r in s.query(KeyVersionRow).all()}
        a, b = rows["l1-v1"], rows["l2-v1"]
        for col in ("kek_id", "wrapped_dek", "nonce", "ciphertext"):
            va, vb = getattr(a, col), getattr(b, col)
            setattr(a, col, vb)
            setattr(b, col, va)
    with pytest.raises(KekError):
        svc.ctx.store.verification_material(svc.ctx.profile, 1)
    r = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json={"texts": ["text text text text"]})
    assert r.status_code == 503
    assert r.json() == {"detail": "key material is unavailable (KEK)"}


def test_kek_rotation_rewraps_without_changing_tables(svc, monkeypatch, capsys):
    import json

    from verifier.cli import main

    svc.init_keys()
    store, prof = svc.ctx.store, svc.ctx.profile
    before = {r.version: (r.kek_id, r.wrapped_dek, r.ciphertext) for r in _rows(svc)}
    tables_before = store.active_keyset(prof)
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    assert main(["kek", "rotate", "--retire-old"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rewrapped"] == 2 and len(out["retired"]) == 1
    store.kek.current._cache.clear()
    after = {r.version: (r.kek_id, r.wrapped_dek, r.ciphertext) for r in _rows(svc)}
    for v, (kid, wrapped, ct) in after.items():
        assert kid == out["kek_id"] != before[v][0]
        assert wrapped != before[v][1] and ct == before[v][2]
    tables_after = store.active_keyset(prof)
    assert [t.entries for t in tables_after.tables] == [t.entries for t in tables_before.tables]
    assert not (svc.settings.kek_path / f"{out['retired'][0]}.key").exists()


def test_request_path_decrypts_only_allowed_levels(svc, monkeypatch):
    svc.init_keys()
    svc.client.post("/v1/keys/2/rotate", headers=svc.auth("admin"))
    opened = []
    real = type(svc.ctx.store)._open

    def spy(self, row):
        opened.append(row.level)
        return real(self, row)

    monkeypatch.setattr(type(svc.ctx.store), "_open", spy)
    body = {"texts": ["an ordinary sentence about the weather today"]}
    r = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json=body)
    assert r.status_code == 200
    assert opened == [1]
    assert [lv["level"] for lv in r.json()["results"][0]["levels"]] == [1]
    opened.clear()
    # Level-1 material is cached (verifier.keys.cache): the same level asked again opens nothing.
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={**body, "max_level": 1})
    assert r.status_code == 200 and opened == []
    svc.client.post("/v1/verify", headers=svc.auth("auditor"), json=body)
    assert sorted(opened) == [1, 2, 2]  # the all-levels entry is its own: built from its rows, not shared
    opened.clear()
    r = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json=body)
    assert r.status_code == 200 and opened == []
    entries = svc.ctx.runner.cache._entries
    assert sorted(entries) == [(svc.ctx.profile.name, 1), (svc.ctx.profile.name, 2)]
    assert sorted(entries[(svc.ctx.profile.name, 1)].material.tables) == [1]  # no level-2 table in a moderator's


def test_hero_cli_uses_the_db_store(lite, monkeypatch, capsys):
    import json

    from verifier.cli import main
    from verifier.cli.common import open_store
    from verifier.keys.service import DbKeyStore

    monkeypatch.setenv("HERO_DATABASE_URL", lite.settings.db_url)
    monkeypatch.setenv("HERO_PROFILE", lite.settings.profile)  # one profile: the CLI uses the service's
    assert isinstance(open_store(), DbKeyStore)
    assert main(["keys", "init"]) == 0
    capsys.readouterr()
    assert main(["keys", "rotate", "--level", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["version"]["version"] == "l2-v2"
    assert main(["keys", "destroy", "--level", "2", "--version", "l2-v1", "--confirm", "nope"]) == 2
    assert main(["keys", "destroy", "--level", "2", "--version", "l2-v1", "--confirm", "l2-v1"]) == 0
    listing = lite.client.get("/v1/keys", headers=lite.auth("admin")).json()
    assert {v["version"]: v["status"] for v in listing["versions"]}["l2-v1"] == "destroyed"


def test_alembic_cli_builds_schema(tmp_path, monkeypatch):
    import subprocess
    import sys

    from sqlalchemy import create_engine, inspect

    from verifier.base.settings import REPO_ROOT

    url = f"sqlite:///{tmp_path / 'mig.db'}"
    env = {"HERO_DATABASE_URL": url, "PATH": "", "HOME": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    names = set(inspect(create_engine(url)).get_table_names())
    assert {"hero_key_versions", "hero_audit_events", "alembic_version"} <= names


def test_move_profile_keeps_v1_texts_decodable_after_the_v2_upgrade(svc, monkeypatch, capsys):
    """An upgraded deployment holds the keys it made while `default` was the v1 profile under the name `default`.
    `hero keys move-profile --from default --to v1` makes them the v1 profile's keys: the v1 tables derived
    from them are unchanged (old texts decode with --profile v1), the secrets are re-sealed under the new
    name, the move is audited, and `default` can then get fresh v2 keys."""
    import dataclasses
    import json

    from sqlalchemy import select

    from verifier.cli import main
    from verifier.engine.profile import v1_profile

    svc.init_keys()
    store = svc.ctx.store
    svc.client.post("/v1/keys/2/rotate", headers=svc.auth("admin"))
    v1 = v1_profile()
    old_default = dataclasses.replace(v1, name="default")  # what `default` meant before spec v2
    before_tables = {t.version: t.entries for tables in store.verification_material(old_default, 2).tables.values()
                     for t in tables}
    before_ct = {r.version: r.ciphertext for r in _rows(svc)}

    def all_rows() -> list[KeyVersionRow]:
        with svc.ctx.db.session() as s:
            return list(s.scalars(select(KeyVersionRow)))

    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    assert main(["keys", "move-profile", "--from", "default", "--to", "v1", "--confirm", "nope"]) == 2
    assert {r.profile for r in all_rows()} == {"default"}
    capsys.readouterr()
    assert main(["keys", "move-profile", "--from", "default", "--to", "v1", "--confirm", "default"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == "v1" and sorted(out["moved"]) == ["l1-v1", "l2-v1", "l2-v2"]
    rows = all_rows()
    assert {r.profile for r in rows} == {"v1"}
    assert all(r.ciphertext != before_ct[r.version] for r in rows)  # re-sealed: the AEAD binds the name
    after_tables = {t.version: t.entries for tables in store.verification_material(v1, 2).tables.values()
                    for t in tables}
    assert after_tables == before_tables
    # Audited; a second move would merge two key histories and is refused; `default` starts afresh.
    events = svc.client.get("/v1/audit/events", headers=svc.auth("admin")).json()["events"]
    assert any(e["action"] == "keys.move_profile" and e["detail"] == "default -> v1" for e in events)
    assert main(["keys", "init"]) == 2  # the deployment's keys are now v1's: no silent second profile
    assert main(["keys", "init", "--profile", "default"]) == 0  # asked for by name
    assert main(["keys", "move-profile", "--from", "default", "--to", "v1", "--confirm", "default"]) == 2
    assert main(["keys", "move-profile", "--from", "nobody", "--to", "v1", "--confirm", "nobody"]) == 2
    assert {r.profile for r in all_rows()} == {"v1", "default"}
