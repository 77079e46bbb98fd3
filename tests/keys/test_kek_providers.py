"""KEK providers against the real services: OpenBao's dev server, moto's KMS server, SoftHSM2.

Each: keys init, verify texts, `hero kek rotate` (within the provider, and from `local` into it), verify again
with a cold cache; a wrong associated data / context is refused; with the KEK down the API answers 503 and
changes nothing, a queued job waits untried, and all recovers when it is back; the DB, logs and responses
hold no data key, master secret, token or PIN.
"""

from __future__ import annotations

import base64
import json
import logging
import os

import pytest
from sqlalchemy import select

from tests.helpers.kms import start_moto, start_openbao, start_softhsm
from tests.helpers.service import matched_version, secret_forms
from tests.helpers.workers import job_doc, make_texts
from tests.keys.test_keys import db_dump
from verifier.jobs import service as jobs
from verifier.jobs.drain import KEK_RETRY_S, DrainContext, drain
from verifier.jobs.models import JobItemRow
from verifier.keys.crypto import associated_data
from verifier.keys.kek import KekError, KekUnreachable
from verifier.process import profile_lookup

PROVIDERS = ["openbao", "aws-kms", "pkcs11"]
PREFIX = {"openbao": "openbao-", "aws-kms": "awskms-", "pkcs11": "pkcs11-", "local": "local-"}


@pytest.fixture(scope="session")
def kms_services(tmp_path_factory):
    """Started on first use, one of each per test session."""
    started: dict = {}
    stops: list = []

    def get(name: str):
        if name not in started:
            tmp = tmp_path_factory.mktemp(name)
            start = {"openbao": start_openbao, "aws-kms": start_moto, "pkcs11": start_softhsm}[name]
            kms, handle = start(tmp)
            if name == "pkcs11":  # read once, when the module is first loaded into this process
                os.environ.update(kms.env)
            started[name] = kms
            if handle is not None:
                stops.append(handle)
        return started[name]

    yield get
    for h in stops:
        (h.terminate if hasattr(h, "terminate") else h.stop)()


@pytest.fixture(params=PROVIDERS)
def kms(request, kms_services, monkeypatch):
    k = kms_services(request.param)
    for key, value in k.env.items():
        monkeypatch.setenv(key, value)
    return k


def _env_for_cli(monkeypatch, svc, provider: str, settings: dict) -> None:
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    monkeypatch.setenv("HERO_KEK_PROVIDER", provider)
    for key, value in settings.items():
        monkeypatch.setenv(f"HERO_{key.upper()}", str(value))


def _rotate_cli(capsys, *extra: str) -> dict:
    from verifier.cli import main

    capsys.readouterr()
    assert main(["kek", "rotate", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _verify(svc, texts) -> list[str | None]:
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": texts})
    assert r.status_code == 200, r.text
    return [matched_version(res, 1) for res in r.json()["results"]]


def _deks(svc) -> list[bytes]:
    out = []
    for row in svc.ctx.store.version_rows(svc.ctx.profile):
        dek = svc.ctx.store.kek.unwrap(row.kek_id, row.wrapped_dek, associated_data(row.profile, row.level,
                                                                                       row.version))
        out += [dek, dek.hex().encode(), base64.b64encode(dek)]
    return out


def test_init_verify_rotate_verify_with_no_key_bytes_anywhere(kms, make_service, tmp_path, monkeypatch, capsys,
                                                              caplog):
    caplog.set_level(logging.DEBUG)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    # Start on today's local files, then migrate into the provider: `hero kek rotate` across providers.
    svc = make_service(url)
    svc.init_keys()
    texts = make_texts(svc, 3, steps=40)
    first = _verify(svc, texts)
    assert any(first)
    _env_for_cli(monkeypatch, svc, kms.name, kms.settings)
    out = _rotate_cli(capsys, "--retire-old")
    assert out["kek_id"].startswith(PREFIX[kms.name]) and out["rewrapped"] == 2
    assert any(k.startswith("local-") for k in out["retired"])
    assert not list((svc.settings.kek_path).glob("local-*.key"))  # the local KEK files are gone

    svc2 = make_service(url, kek_provider=kms.name, **kms.settings)  # a cold cache: every row unwrapped anew
    rows = svc2.ctx.store.version_rows(svc2.ctx.profile)
    assert {r.kek_id for r in rows} == {out["kek_id"]}
    assert _verify(svc2, texts) == first

    # Within the provider: a new KEK version (OpenBao, PKCS#11) or another KMS key (AWS), rows re-wrapped.
    if kms.name == "aws-kms":
        monkeypatch.setenv("HERO_KEK_KEY_ID", kms.other_key)
    inner = _rotate_cli(capsys)
    assert inner["kek_id"] != out["kek_id"] and inner["rewrapped"] == 2
    svc3 = make_service(url, kek_provider=kms.name, **{**kms.settings, **(
        {"kek_key_id": kms.other_key} if kms.name == "aws-kms" else {})})
    assert {r.kek_id for r in svc3.ctx.store.version_rows(svc3.ctx.profile)} == {inner["kek_id"]}
    assert _verify(svc3, texts) == first
    r = svc3.client.post("/v1/keys/1/rotate", headers=svc3.auth("admin"))
    assert r.status_code == 201, r.text
    listing = svc3.client.get("/v1/keys", headers=svc3.auth("admin"))

    # No data key, master secret, token or PIN in the DB, the logs or the responses.
    haystack = db_dump(svc3) + json.dumps([out, inner, r.json(), listing.json()]).encode()
    haystack += (caplog.text + "\n".join(str(rec.__dict__) for rec in caplog.records)).encode()
    haystack += repr(svc3.ctx.store.kek).encode() + repr(svc3.ctx.store.kek.current).encode()
    forms = secret_forms(svc3) + _deks(svc3) + kms.secrets
    assert len(forms) > 20
    for f in forms:
        assert f not in haystack


def test_wrong_associated_data_is_refused(kms, make_service, sqlite_url):
    svc = make_service(sqlite_url, kek_provider=kms.name, **kms.settings)
    kek = svc.ctx.store.kek
    dek = os.urandom(32)
    kid, wrapped = kek.wrap(dek, b"hero/keyrow/v1|profile=default|level=1|version=l1-v1")
    assert kid.startswith(PREFIX[kms.name]) and dek not in wrapped
    assert kek.unwrap(kid, wrapped, b"hero/keyrow/v1|profile=default|level=1|version=l1-v1") == dek
    for aad in (b"hero/keyrow/v1|profile=default|level=2|version=l1-v1", b""):
        with pytest.raises(KekError) as err:
            kek.unwrap(kid, wrapped, aad)
        assert not isinstance(err.value, KekUnreachable)  # refused, not "down"
    tampered = bytearray(wrapped)
    tampered[-3] ^= 1
    with pytest.raises(KekError):
        kek.unwrap(kid, bytes(tampered), b"hero/keyrow/v1|profile=default|level=1|version=l1-v1")


def test_kek_down_is_503_and_nothing_is_lost(kms, make_service, tmp_path):
    url = f"sqlite:///{tmp_path / 'd.db'}"
    svc = make_service(url, kek_provider=kms.name, **kms.settings)
    svc.init_keys()
    texts = make_texts(svc, 3, steps=40)
    first = _verify(svc, texts)
    jid = jobs.create_job(svc.ctx.db, svc.ctx.store.kek, owner_sub="admin-1", role="admin", jti="j",
                          profile=svc.ctx.profile.name, max_level=2, alpha=svc.settings.alpha, texts=texts)
    before = db_dump(svc)
    cold = make_service(url, kek_provider=kms.name, **kms.settings)  # nothing unwrapped yet
    kms.down()
    try:
        for path, body in (("/v1/verify", {"texts": texts}), ("/v1/keys/1/rotate", None),
                           ("/v1/jobs", {"texts": texts})):
            role = "admin" if path != "/v1/verify" else "auditor"
            r = cold.client.post(path, headers=cold.auth(role), json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.json() == {"detail": "the key service (KEK provider) is unreachable; retry later"}
            assert r.headers["Retry-After"] == "5"
        # The queued job waits: its items are handed back untried, the job is not failed.
        ctx = cold.ctx
        dc = DrainContext(db=ctx.db, store=ctx.store, profiles=profile_lookup(ctx.profile),
                          runner=ctx.runner, policy=ctx.policy, worker="test", batch_size=2)
        out = drain(dc, jid)
        assert out.written == 0 and out.wait == KEK_RETRY_S
        with ctx.db.session() as s:
            items = s.execute(select(JobItemRow.status, JobItemRow.attempts).where(JobItemRow.job_id == jid)).all()
        assert items and all(it == ("pending", 0) for it in items)
        assert job_doc(ctx.db, jid)["status"] in ("queued", "running")
        after = db_dump(svc)
        assert after.count(b"hero_key") == before.count(b"hero_key")
        assert len(svc.ctx.store.version_rows(svc.ctx.profile)) == 2  # no key version added by the refused rotate
        # The process that had the material cached still verifies: the hot path makes no KEK call.
        assert _verify(svc, texts) == first
    finally:
        kms.up()
    assert _verify(cold, texts) == first
    assert drain(dc, jid).written == len(texts)
    doc = job_doc(cold.ctx.db, jid)
    assert doc["status"] == "done" and [matched_version(res, 1) for res in doc["results"]] == first


@pytest.mark.parametrize("kms", ["pkcs11"], indirect=True)
def test_pkcs11_keks_are_sensitive_and_never_extractable(kms, make_service, sqlite_url):
    import pkcs11

    svc = make_service(sqlite_url, kek_provider=kms.name, **kms.settings)
    provider = svc.ctx.store.kek.current
    provider.rotate()
    with provider._lock:
        keys = provider._versions()
        assert len(keys) >= 2
        for key in keys.values():
            assert key[pkcs11.Attribute.SENSITIVE] and not key[pkcs11.Attribute.EXTRACTABLE]
            assert key[pkcs11.Attribute.VALUE_LEN] == 32
            with pytest.raises(pkcs11.exceptions.PKCS11Error):  # the token refuses to hand out the key
                key[pkcs11.Attribute.VALUE]
