"""The verification hot path: cached key material invalidated across processes, the
micro-batcher (group commit, one audit event per text, identical answers), fail-closed audit under batching."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter

import pytest

from verifier.audit.service import AuditUnavailable, text_digest
from verifier.audit.transparency import verify_receipt

TEXTS = [
    "An ordinary sentence that nobody watermarked, long enough to be scored by the detector.",
    "The council met on Tuesday to discuss the new budget for roads and schools in the district.",
    "Short one, still fine.",
    "Researchers said the results were preliminary and that more work would be needed to confirm them, "
    "adding that the sample had been small and drawn from a single hospital in the north of the country.",
]


def _hero(svc, *args: str) -> subprocess.CompletedProcess:
    """`hero ...` in another process, on the service's database and home (so: its KEK)."""
    env = {**os.environ, "HERO_HOME": str(svc.settings.home), "HERO_DATABASE_URL": svc.settings.db_url}
    out = subprocess.run([sys.executable, "-m", "verifier.cli", *args], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def _level1(svc, role: str = "moderator") -> dict:
    r = svc.client.post("/v1/verify", headers=svc.auth(role), json={"texts": TEXTS[:1]})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["levels"][0]


def _parallel(n: int, fn) -> list:
    out: list = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def _events(svc) -> list[dict]:
    r = svc.client.get("/v1/audit/events?after=0&limit=1000", headers=svc.auth("auditor", "reader"))
    return [e for e in r.json()["events"] if e["action"] == "verify"]


def _strip(results: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "receipt"} for r in results]


# -- material cache ----------------------------------------------------------------------------------
def test_key_changes_in_another_process_are_seen_by_the_next_request(svc):
    svc.init_keys()
    svc.client.post("/v1/keys/1/rotate", headers=svc.auth("admin"))
    before = _level1(svc)  # caches level-1 material (l1-v1 and l1-v2)
    assert before["status"] == "absent" and "l1-v1" not in before["reason"]
    cache = svc.ctx.runner.cache
    epoch = cache.epoch(svc.ctx.profile)

    _hero(svc, "keys", "disable", "--level", "1", "--version", "l1-v1")
    lv = _level1(svc)
    assert lv["status"] == "absent" and "l1-v1 disabled" in lv["reason"]
    _hero(svc, "keys", "enable", "--level", "1", "--version", "l1-v1")
    assert "l1-v1" not in _level1(svc)["reason"]
    _hero(svc, "keys", "destroy", "--level", "1", "--version", "l1-v1", "--confirm", "l1-v1")
    lv = _level1(svc)
    assert lv["status"] == "undecodable" and "l1-v1 destroyed" in lv["reason"]
    _hero(svc, "keys", "rotate", "--level", "1")
    lv = _level1(svc)
    assert lv["status"] == "undecodable" and "l1-v1 destroyed" in lv["reason"]
    assert cache.epoch(svc.ctx.profile) == epoch + 4
    entry = cache._entries[(svc.ctx.profile.name, 1)]
    assert entry.epoch == epoch + 4
    assert sorted(t.version for t in entry.material.tables[1]) == ["l1-v2", "l1-v3"]


def test_a_cached_entry_is_reused_until_the_epoch_moves(lite, monkeypatch):
    lite.init_keys()
    calls = []
    real = lite.ctx.store.verification_material
    monkeypatch.setattr(lite.ctx.store, "verification_material", lambda p, n: calls.append(n) or real(p, n))
    for _ in range(3):
        _level1(lite)
    assert calls == [1]
    lite.client.post("/v1/keys/2/rotate", headers=lite.auth("admin"))  # any key change bumps the epoch
    _level1(lite)
    assert calls == [1, 1]


def test_cached_material_never_shows_key_bytes_and_is_dropped_on_close(lite):
    from tests.helpers.service import secret_forms

    lite.init_keys()
    _level1(lite, "auditor")
    cache = lite.ctx.runner.cache
    shown = " ".join([repr(cache), str(cache), *(repr(e) for e in cache._entries.values()),
                      repr(lite.ctx.runner), repr(lite.ctx.batcher)]).encode()
    for form in secret_forms(lite):
        assert form not in shown
    assert cache._entries
    lite.ctx.close()
    assert not cache._entries


def test_no_keys_is_409_and_not_cached(lite):
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={"texts": TEXTS[:1]})
    assert r.status_code == 409
    lite.init_keys()
    assert _level1(lite)["status"] == "absent"


# -- micro-batching ----------------------------------------------------------------------------------
def test_a_burst_is_batched_and_each_text_audited_exactly_once(svc, make_service):
    svc.init_keys()
    batched = make_service(svc.settings.db_url, verify_batch_window_ms=50)
    n = 24

    def call(i: int):
        texts = [f"{TEXTS[i % len(TEXTS)]} Request {i}."] + ([f"Second text of request {i}."] if i % 3 == 0 else [])
        role = "auditor" if i % 2 else "moderator"
        r = batched.client.post("/v1/verify", headers=batched.auth(role, f"u{i}"), json={"texts": texts})
        return texts, role, r

    out = _parallel(n, call)
    assert all(r.status_code == 200 for _, _, r in out), [r.text for _, _, r in out if r.status_code != 200]
    assert batched.ctx.batcher.largest > 1  # the burst was coalesced
    vkey = svc.client.get("/v1/audit/public-key", headers=svc.auth("moderator")).text.strip()
    sent = Counter()
    for texts, role, r in out:
        results = r.json()["results"]
        assert len(results) == len(texts)
        for text, res in zip(texts, results, strict=True):
            sent[text_digest(text)] += 1
            ev = res["receipt"]["event"]
            assert ev["text_sha256"] == text_digest(text) and ev["role"] == role
            verify_receipt(res["receipt"], vkey, text=text)  # each result: its own event, its own proof
            assert len(res["levels"]) == (2 if role == "auditor" else 1)
    events = _events(svc)
    assert Counter(e["text_sha256"] for e in events) == sent  # every text audited exactly once
    assert len({e["idx"] for e in events}) == len(events)


def test_answers_are_identical_with_and_without_batching(svc, make_service):
    svc.init_keys()
    single = make_service(svc.settings.db_url, verify_batching=False)
    batched = make_service(svc.settings.db_url, verify_batch_window_ms=50)
    assert single.ctx.batcher is None
    cases = [([t], role) for t in TEXTS for role in ("moderator", "auditor")] + [(TEXTS, "auditor")]
    alone = []
    for texts, role in cases:
        r = single.client.post("/v1/verify", headers=single.auth(role), json={"texts": texts})
        assert r.status_code == 200, r.text
        alone.append(_strip(r.json()["results"]))

    def call(i: int):
        texts, role = cases[i]
        return batched.client.post("/v1/verify", headers=batched.auth(role), json={"texts": texts})

    together = _parallel(len(cases), call)
    assert batched.ctx.batcher.largest > 1
    assert [_strip(r.json()["results"]) for r in together] == alone


def test_audit_failure_fails_every_caller_of_the_batch(lite, make_service, monkeypatch):
    lite.init_keys()
    batched = make_service(lite.settings.db_url, verify_batch_window_ms=50)

    def boom(db, prepare, *a, **kw):
        raise AuditUnavailable("audit log unavailable (OperationalError)")

    monkeypatch.setattr("verifier.verify.service.record_prepared", boom)  # the one append of a verify batch
    out = _parallel(8, lambda i: batched.client.post("/v1/verify", headers=batched.auth("moderator"),
                                                      json={"texts": [TEXTS[i % 4]]}))
    for r in out:
        assert r.status_code == 503 and set(r.json()) == {"detail"} and "audit" in r.json()["detail"]
    monkeypatch.undo()
    assert _events(lite) == []  # nothing recorded, nothing released


def test_one_callers_bad_input_does_not_fail_the_batch(lite, make_service, monkeypatch):
    from verifier.verify.runner import TextNotDecodable

    lite.init_keys()
    batched = make_service(lite.settings.db_url, verify_batch_window_ms=50)
    real = batched.ctx.runner.decode

    def picky(job):
        if any(t.startswith("BAD") for t in job.texts):
            raise TextNotDecodable("text cannot be decoded")
        return real(job)

    monkeypatch.setattr(batched.ctx.runner, "decode", picky)
    texts = ["BAD input here", *TEXTS]
    out = _parallel(len(texts), lambda i: batched.client.post(
        "/v1/verify", headers=batched.auth("moderator"), json={"texts": [texts[i]]}))
    assert [r.status_code for r in out] == [422] + [200] * len(TEXTS)
    assert sorted(e["text_sha256"] for e in _events(lite)) == sorted(text_digest(t) for t in TEXTS)


@pytest.mark.parametrize("batching", [True, False])
def test_database_busy_on_material_is_503_either_way(lite, make_service, monkeypatch, batching):
    from sqlalchemy.exc import OperationalError

    lite.init_keys()
    svc = make_service(lite.settings.db_url, verify_batching=batching)

    def locked(*a, **k):
        raise OperationalError("SELECT 1", {}, Exception("database is locked"))

    monkeypatch.setattr(svc.ctx.store, "verification_material", locked)
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": TEXTS[:1]})
    assert r.status_code == 503 and "busy" in r.json()["detail"]


def test_requests_never_consult_opentelemetry_providers(lite, monkeypatch):
    """FastAPI's native OpenTelemetry hooks are off: a request neither looks up nor feeds any global provider
    (nothing leaves through an exporter the service does not configure, and no per-request lookup cost)."""
    pytest.importorskip("opentelemetry.trace")  # FastAPI without native telemetry does not bring it
    from opentelemetry import _logs, metrics, trace

    asked = []
    for mod, name in ((trace, "get_tracer_provider"), (metrics, "get_meter_provider"),
                      (_logs, "get_logger_provider")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda real=real, name=name: asked.append(name) or real())
    lite.init_keys()
    assert lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={"texts": TEXTS[:1]}).status_code == 200
    assert lite.client.get("/v1/nope", headers=lite.auth("moderator")).status_code == 404
    assert asked == []
