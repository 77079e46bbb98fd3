"""Each text its own `expect` on POST /v1/verify: `"texts": [{"text": ..., "expect": {...}}, ...]`
beside plain strings; the request-level `expect` as before; results in input order. And /readyz names the
profile the deployment serves (a new deployment: NEW_DEPLOYMENT_PROFILE)."""

from __future__ import annotations

import pytest

from tests.helpers.workers import make_texts
from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE


@pytest.fixture
def v3(sqlite_url, make_service):
    svc = make_service(sqlite_url, profile="v3")
    svc.init_keys()
    return svc


def test_each_text_asks_about_its_own_model(v3):
    texts = make_texts(v3, 3, steps=60)  # payloads: model = 7 i
    body = {"texts": [{"text": texts[0], "expect": {"model": 0}}, texts[1], {"text": texts[2], "expect": {"model": 14}},
                      {"text": texts[1], "expect": {"model": 0}}]}
    r = v3.client.post("/v1/verify", headers=v3.auth("moderator"), json=body)
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert len(res) == 4 and "expected" not in res[1]
    assert [(x["expected"][0]["fields"], x["expected"][0]["matches"]) for x in (res[0], res[2], res[3])] == [
        ({"model": 0}, True), ({"model": 14}, True), ({"model": 0}, False)]
    both = v3.client.post("/v1/verify", headers=v3.auth("moderator"),
                          json={**body, "expect": {"model": 7}})
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    bad = v3.client.post("/v1/verify", headers=v3.auth("moderator"),
                         json={"texts": ["a text", {"text": "x" * 30000, "expect": {"model": 1}}]})
    assert bad.status_code == 413 and bad.json()["detail"].startswith("text 2 is too long")


def test_readyz_names_a_new_deployments_profile(sqlite_url, make_service):
    svc = make_service(sqlite_url, profile=None)  # no HERO_PROFILE, no keys: a new deployment
    assert svc.client.get("/readyz").json() == {"status": "ready", "profile": NEW_DEPLOYMENT_PROFILE}
    assert svc.init_keys()["profile"] == NEW_DEPLOYMENT_PROFILE
