"""End to end: admin registers a provider, the provider fetches its sealed bundle over HTTP, a
separate process with no database URL and no KEK generates with SmolLM2 from the bundle, the service decodes
the texts (fields and key versions); after a rotation the provider's refresher picks up the new bundle (new
ETag) and old and new texts both decode."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.service import matched_version
from verifier.provider import BundleSource, generate_keypair

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "provider" / "generate_from_bundle.py"
TOKENS = 120  # with 80, a clean-clone CI run had one text just short of significance (p 1.4e-4, 76 tokens scored)
PROMPTS = ["The history of the printing press", "A short guide to growing tomatoes"]


def _provider_process(tmp_path: Path, bundle_b64: str, key_file: Path, payloads: list[dict], service_key: str) -> dict:
    bundle_file = tmp_path / "bundle.b64"
    bundle_file.write_text(bundle_b64)
    home = tmp_path / "provider-home"  # empty: no KEK, no database, no dev keys
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    env.update(HERO_HOME=str(home), PYTHONPATH=str(ROOT),
               HERO_MODEL_CACHE=os.environ.get("HERO_MODEL_CACHE", str(Path.home() / ".hero" / "models")))
    spec = json.dumps({"prompts": PROMPTS, "payloads": payloads, "tokens": TOKENS, "service_key": service_key,
                       "provider_id": "fleet-1"})
    res = subprocess.run([sys.executable, str(SCRIPT), str(bundle_file), str(key_file), spec], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=3600)  # a bound, not a speed target
    assert res.returncode == 0, res.stderr[-3000:]
    assert not home.exists() or not any(home.rglob("*kek*"))
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["blocked_loaded"] == []
    return out


def _verify(svc, texts):
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor", "aud-1"), json={"texts": texts})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _check(results, payloads, version):
    exact = 0
    for res, pay in zip(results, payloads, strict=True):
        assert res["watermarked"], res
        assert matched_version(res, 1) in (f"l1-{version}", None), json.dumps(res)
        assert matched_version(res, 2) in (f"l2-{version}", None), json.dumps(res)
        model, user = res["levels"][0]["fields"], res["levels"][1]["fields"]
        # a released value is always this text's own payload (never another row's); exactness from 120 tokens
        # is probabilistic, so at least one of the two texts must release its exact user
        assert model is None or model["model"] in (pay["model"], None)
        assert user is None or user["user"] in (pay["user"], None)
        exact += user is not None and user["user"] == pay["user"]
    assert exact >= 1, results


def test_provider_generates_from_a_sealed_bundle_without_the_database(e2e, tmp_path):
    svc = e2e
    svc.init_keys()
    sk, pk = generate_keypair()
    key_file = tmp_path / "provider.key"
    key_file.write_bytes(sk)
    key_file.chmod(0o600)
    admin = svc.auth("admin", "root")
    r = svc.client.post("/v1/providers", headers=admin,
                        json={"provider_id": "fleet-1", "public_key": base64.b64encode(pk).decode()})
    assert r.status_code == 201, r.text

    # the provider's refresher, over HTTP with the provider's own token
    raw: list[str] = []
    # the provider pins the service's key (here from the endpoint, with its own token) and checks every bundle
    pinned = svc.client.get("/v1/audit/public-key", headers=svc.auth("provider", "fleet-1")).text
    source = BundleSource(sk, lambda: svc.token("provider", "fleet-1"), client=svc.client, service_key=pinned)
    orig_post = svc.client.post

    def recording_post(path, **kw):  # keep the base64 bundle the provider fleet would ship to its workers
        resp = orig_post(path, **kw)
        if path.endswith("generation-bundle") and resp.status_code == 200:
            raw.append(resp.json()["bundle"])
        return resp

    svc.client.post = recording_post  # type: ignore[method-assign]
    try:
        first = source.bundle
        assert first.key_versions == {1: "l1-v1", 2: "l2-v1"}
        old_payloads = [{"model": 1234, "user": 3001}, {"model": 77, "user": 4000}]
        old = _provider_process(tmp_path, raw[-1], key_file, old_payloads, pinned)
        assert old["key_versions"] == [{"1": "l1-v1", "2": "l2-v1"}] * 2 and old["bundle_id"] == first.bundle_id
        _check(_verify(svc, old["texts"]), old_payloads, "v1")

        for lv in (1, 2):
            assert svc.client.post(f"/v1/keys/{lv}/rotate", headers=admin).status_code == 201
        assert source.refresh() is True  # If-None-Match with the old ETag: 200, a new bundle
        second = source.bundle
        assert second.etag != first.etag and second.key_versions == {1: "l1-v2", 2: "l2-v2"}
        new_payloads = [{"model": 4095, "user": 12}, {"model": 2, "user": 2222}]
        new = _provider_process(tmp_path, raw[-1], key_file, new_payloads, pinned)
        assert new["key_versions"] == [{"1": "l1-v2", "2": "l2-v2"}] * 2
    finally:
        svc.client.post = orig_post  # type: ignore[method-assign]

    both = _verify(svc, old["texts"] + new["texts"])
    _check(both[:2], old_payloads, "v1")
    _check(both[2:], new_payloads, "v2")
    issued = [e for e in svc.client.get("/v1/audit/events?limit=1000", headers=admin).json()["events"]
              if e["action"] == "keys.bundle"]
    assert [e["key_version"] for e in issued] == ["l1-v1,l2-v1", "l1-v2,l2-v2"]
    assert {e["subject"] for e in issued} == {"fleet-1"}
