"""Findings 9, 10, 11, 13: file modes, destruction that leaves no copy, safe KEK retirement, enable,
consistent init/rotate, one-line errors for an un-migrated database, disabled versions not tried."""

from __future__ import annotations

import json
import os
import stat

import pytest
from sqlalchemy import text

from verifier.cli import main

HUMAN = "The committee met on Tuesday to discuss the budget for next year and agreed to postpone the vote."


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_home_is_0700_and_secrets_and_database_0600(make_service, hero_home):
    hero_home.mkdir(parents=True)
    hero_home.chmod(0o755)
    db = hero_home / "hero.db"
    db.touch()
    db.chmod(0o644)  # an existing database from before: tightened
    svc = make_service(f"sqlite:///{db}")
    svc.init_keys()
    svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [HUMAN]})
    assert _mode(hero_home) == 0o700
    for p in [db, db.with_name("hero.db-wal"), db.with_name("hero.db-shm"), svc.settings.log_key_path,
              *svc.settings.kek_path.glob("*")]:
        assert p.exists() and _mode(p) == 0o600, (p, oct(_mode(p)))
    assert _mode(svc.settings.kek_path) == 0o700


def _key_bytes(svc, version) -> list[bytes]:
    with svc.ctx.db.session() as s:
        row = s.execute(text("SELECT ciphertext, wrapped_dek, nonce FROM hero_key_versions WHERE version = :v"),
                        {"v": version}).one()
    return [bytes(b) for b in row]


def _stored_bytes(svc) -> bytes:
    """Every byte the database keeps for the key table: files on SQLite, raw pages on PostgreSQL."""
    if svc.ctx.db.dialect == "sqlite":
        path = svc.ctx.db.engine.url.database
        return b"".join(open(p, "rb").read() for p in (path, path + "-wal", path + "-shm") if os.path.exists(p))
    with svc.ctx.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public"))
        pages = c.execute(text("SELECT pg_relation_size('hero_key_versions') / 8192")).scalar()
        return b"".join(
            bytes(c.execute(text("SELECT public.get_raw_page('hero_key_versions', 'main', :n)"), {"n": n}).scalar())
            for n in range(pages)
        )


def test_destroyed_key_bytes_are_absent_from_the_database_files(make_service, db_url, hero_home, request):
    url = f"sqlite:///{hero_home / 'hero.db'}" if db_url.startswith("sqlite") else db_url
    svc = make_service(url)
    svc.init_keys()
    admin = svc.auth("admin")
    assert svc.client.post("/v1/keys/2/rotate", headers=admin).status_code == 201
    secret = _key_bytes(svc, "l2-v1")
    # Status changes leave old row versions behind (PostgreSQL MVCC; SQLite WAL frames).
    assert svc.client.post("/v1/keys/2/versions/l2-v1/disable", headers=admin).status_code == 200
    assert svc.client.post("/v1/keys/2/versions/l2-v1/enable", headers=admin).status_code == 200
    before = _stored_bytes(svc)
    assert all(b in before for b in secret)  # the scan can see them
    r = svc.client.post("/v1/keys/2/versions/l2-v1/destroy", headers=admin, json={"confirm": "l2-v1"})
    assert r.status_code == 200, r.text
    after = _stored_bytes(svc)
    assert [b in after for b in secret] == [False, False, False]


def test_kek_retirement_refuses_while_a_data_key_uses_it(make_service, sqlite_url, monkeypatch, capsys):
    from verifier.jobs import service as jobs

    svc = make_service(sqlite_url)
    svc.init_keys()
    kek = svc.ctx.store.kek
    old = kek.current_id()
    job_id = jobs.create_job(svc.ctx.db, kek, owner_sub="a", role="auditor", jti="j", profile="default",
                             max_level=2, alpha=1e-4, texts=[HUMAN])  # queued, wrapped under the old KEK
    monkeypatch.setenv("HERO_DATABASE_URL", sqlite_url)
    capsys.readouterr()
    assert main(["kek", "rotate", "--retire-old"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["retired"] == [old] and out["rewrapped_jobs"] == 1
    with svc.ctx.db.session() as s:
        assert s.execute(text("SELECT kek_id FROM hero_jobs WHERE id = :j"), {"j": job_id}).scalar() != old
    claim = jobs.claim(svc.ctx.db, job_id, "w", 10, 60)
    assert jobs.open_texts(kek, claim) == [HUMAN]  # the job still opens after the old KEK is gone

    # A data key still wrapped by a KEK (e.g. written by a node that had not seen the rotation): refused.
    from verifier.jobs.kek_rotation import KekInUse, retire_kek

    newer = kek.rotate()
    with pytest.raises(KekInUse, match="still wraps"):
        retire_kek(svc.ctx.db, kek, out["kek_id"])
    assert out["kek_id"] in kek.ids() and newer == kek.current_id()


def test_kek_errors_never_show_server_paths(make_service, sqlite_url):
    from verifier.keys.kek import KekError

    svc = make_service(sqlite_url)
    with pytest.raises(KekError) as err:
        svc.ctx.store.kek.unwrap("local-000000000000", b"\0" * 40, b"aad")
    assert str(svc.settings.home) not in str(err.value) and "/" not in str(err.value)


def test_enable_api_and_cli(lite, monkeypatch, capsys):
    lite.init_keys()
    admin = lite.auth("admin")
    lite.client.post("/v1/keys/1/rotate", headers=admin)
    r = lite.client.post("/v1/keys/1/versions/l1-v1/disable", headers=admin)
    assert r.json()["status"] == "disabled"
    r = lite.client.post("/v1/keys/1/versions/l1-v1/enable", headers=admin)
    assert r.status_code == 200 and r.json()["status"] == "verify-only"
    assert lite.client.post("/v1/keys/1/versions/l1-v1/enable", headers=lite.auth("auditor")).status_code == 403
    assert lite.client.post("/v1/keys/1/versions/l1-v9/enable", headers=admin).status_code == 404
    lite.client.post("/v1/keys/1/versions/l1-v1/disable", headers=admin)
    monkeypatch.setenv("HERO_DATABASE_URL", lite.settings.db_url)
    capsys.readouterr()
    assert main(["keys", "enable", "--level", "1", "--version", "l1-v1"]) == 0
    assert json.loads(capsys.readouterr().out)["version"]["status"] == "verify-only"
    lite.client.post("/v1/keys/1/versions/l1-v1/destroy", headers=admin, json={"confirm": "l1-v1"})
    assert lite.client.post("/v1/keys/1/versions/l1-v1/enable", headers=admin).status_code == 409
    actions = [e["action"] for e in lite.client.get("/v1/audit/events?limit=100", headers=admin).json()["events"]]
    assert actions.count("keys.enable") >= 1


def test_rotate_on_an_empty_store_and_init_are_consistent(lite, monkeypatch, capsys):
    monkeypatch.setenv("HERO_DATABASE_URL", lite.settings.db_url)
    assert main(["keys", "rotate", "--level", "1"]) == 2
    assert "hero keys init" in capsys.readouterr().err
    # A store left half-initialised (only level 1, as older versions allowed): init completes it.
    lite.ctx.store.rotate_row(lite.ctx.profile, 1, allow_empty=True)
    assert main(["keys", "init"]) == 0
    created = [v["version"] for v in json.loads(capsys.readouterr().out)["versions"]]
    assert created == ["l2-v1"]
    assert main(["keys", "init"]) == 2
    assert "already exist" in capsys.readouterr().err


def test_unmigrated_postgres_is_one_line(pg_reason, monkeypatch, capsys):
    from tests.helpers.postgres import schema_url

    gen = schema_url(pg_reason)
    url = next(gen)
    try:
        monkeypatch.setenv("HERO_DATABASE_URL", url)
        for argv in (["keys", "init"], ["keys", "list"], ["audit", "verify"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "hero db upgrade" in err and "Traceback" not in err, err
    finally:
        gen.close()


def test_disabled_old_version_leaves_human_text_not_watermarked(lite):
    lite.init_keys()
    admin = lite.auth("admin")
    lite.client.post("/v1/keys/1/rotate", headers=admin)
    assert lite.client.post("/v1/keys/1/versions/l1-v1/disable", headers=admin).status_code == 200
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": [HUMAN]})
    (res,) = r.json()["results"]
    assert not res["watermarked"]
    l1 = res["levels"][0]
    assert l1["status"] != "undecodable", l1
    assert "l1-v1" in l1["reason"] and "disabled" in l1["reason"]
    last = lite.client.get("/v1/audit/events?limit=100", headers=admin).json()["events"][-1]
    assert last["outcome"] == "not-watermarked"
