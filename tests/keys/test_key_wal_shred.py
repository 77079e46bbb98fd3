"""a destroyed key version must stay undecryptable from every byte PostgreSQL keeps.

The table's own page is rewritten by VACUUM FULL, but the live pg_wal/ still holds the row as it was inserted
(ciphertext, nonce, wrapped data key). The test finds those bytes in the data directory (so the threat is real
here) and tries to unwrap them with every KEK the service still holds: destroy must have retired the KEK that
wrapped them. Needs the local PostgreSQL's data directory (root here and in CI): skips elsewhere, fails under
HERO_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.helpers.postgres import PG_URL, need

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


def _data_dir() -> Path:
    eng = create_engine(PG_URL)
    try:
        with eng.connect() as c:
            path = Path(c.execute(text("SHOW data_directory")).scalar_one())
            c.execute(text("CHECKPOINT"))  # flush: the scan sees every page and WAL record written so far
    finally:
        eng.dispose()
    if not os.access(path / "pg_wal", os.R_OK | os.X_OK):
        need(f"PostgreSQL data directory {path} is not readable here (not the local cluster, or not root)")
    return path


def _occurrences(root: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Files (relative paths) under `root` that contain each needle."""
    found: dict[str, list[str]] = {name: [] for name in needles}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                data = p.read_bytes()
            except OSError:  # a file removed while walking (WAL recycling, temp files)
                continue
            for name, needle in needles.items():
                if needle in data:
                    found[name].append(str(p.relative_to(root)))
    return found


def test_destroyed_key_is_sealed_for_good_in_pg_wal(pg_url, make_service):
    from verifier.engine.keys import MASTER_SECRET_BYTES
    from verifier.keys import repository as repo
    from verifier.keys.crypto import Sealed, associated_data, open_sealed
    from verifier.keys.kek import KekError

    svc = make_service(pg_url)
    svc.init_keys()
    admin = svc.auth("admin")
    assert svc.client.post("/v1/keys/1/rotate", headers=admin).status_code in (200, 201)
    store, kek = svc.ctx.store, svc.ctx.store.kek
    with store.db.session() as s:
        row = repo.get_version(s, svc.ctx.profile.name, "l1-v1")
        old = {"kek_id": row.kek_id, "wrapped": bytes(row.wrapped_dek), "ciphertext": bytes(row.ciphertext),
               "nonce": bytes(row.nonce)}
        secret = store._open(row)
    assert len(secret) == MASTER_SECRET_BYTES
    job = svc.client.post("/v1/jobs", headers=svc.auth("moderator"), json={"texts": [TEXT]})
    assert job.status_code == 202, job.text

    r = svc.client.post("/v1/keys/1/versions/l1-v1/destroy", headers=admin, json={"confirm": "l1-v1"})
    assert r.status_code == 200, r.text

    root = _data_dir()
    found = _occurrences(root, {"wrapped": old["wrapped"], "ciphertext": old["ciphertext"]})
    assert any(p.startswith("pg_wal") for p in found["wrapped"]), found  # the copy VACUUM cannot reach
    aad = associated_data(svc.ctx.profile.name, 1, "l1-v1")
    held = kek.ids()
    assert held
    recovered = []
    for kid in held:  # every KEK the service still holds, tried on the surviving copy
        try:
            sealed = Sealed(kid, old["wrapped"], old["nonce"], old["ciphertext"])
            recovered.append((kid, open_sealed(kek, sealed, aad) == secret))
        except KekError:
            continue
    assert recovered == [], f"the destroyed secret decrypts from pg_wal with {recovered}"
    local = getattr(kek, "current", kek)  # behind the KEK router: the local file provider
    assert old["kek_id"] not in held and not (Path(local.dir) / f"{old['kek_id']}.key").exists()

    # Everything else survived the re-key: the remaining versions decode, the queued job still opens.
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [TEXT]})
    assert r.status_code == 200, r.text
    versions = {v["version"]: v["status"] for v in svc.client.get("/v1/keys", headers=admin).json()["versions"]}
    assert versions["l1-v1"] == "destroyed" and versions["l1-v2"] == "active"
    assert svc.client.get(f"/v1/jobs/{job.json()['job_id']}", headers=svc.auth("moderator")).status_code == 200
    with store.db.session() as s:
        assert {r.kek_id for r in repo.all_sealed(s)} == {kek.current_id()}
