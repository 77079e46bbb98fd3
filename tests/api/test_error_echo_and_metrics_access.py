"""Error messages echo at most 64 characters of input; /metrics needs a token
outside dev mode and a public exposition carries no verdict or disclosure counts."""

from __future__ import annotations

import pytest

from tests.helpers.workers import make_texts


def _detail(r) -> str:
    assert r.status_code == 422, r.text
    return r.json()["detail"]


@pytest.mark.parametrize("expect", [{"n" * 10_000: 1}, {"model": 10**3999}, {"model": -(10**3999)}])
def test_expect_errors_echo_at_most_64_characters(make_service, sqlite_url, expect):
    svc = make_service(sqlite_url, profile="v3")
    svc.init_keys()
    r = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json={"texts": ["some text"], "expect": expect})
    detail = _detail(r)
    assert len(detail) < 300 and "n" * 65 not in detail and "0" * 65 not in detail, detail


def test_validation_errors_clip_field_names(lite):
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={"texts": ["a"], "y" * 10_000: 1})
    detail = _detail(r)
    assert "y" * 61 in detail and "y" * 62 not in detail and len(detail) < 200, detail
    body = {"texts": ["a"], "expect": {"z" * 9_000: "x"}}
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json=body)
    assert "z" * 62 not in _detail(r)


def test_clip_keeps_short_input_and_marks_a_cut():
    from verifier.base.errors import clip

    assert clip("model") == "'model'"
    assert len(clip("x" * 1000)) == 64 and clip("x" * 1000).endswith("...")
    assert clip(10**5000) == "<int>"  # past Python's digit limit: named, not printed


def test_metrics_need_a_token_outside_dev_mode(tmp_path, monkeypatch):
    from verifier.base.settings import Settings

    monkeypatch.delenv("HERO_METRICS_EXPOSURE", raising=False)
    assert Settings(home=tmp_path).metrics_exposure == "auth"
    assert Settings(home=tmp_path, dev_mode=True).metrics_exposure == "public"
    assert Settings(home=tmp_path, metrics_exposure="public").metrics_exposure == "public"  # an explicit choice
    monkeypatch.setenv("HERO_METRICS_EXPOSURE", "off")
    assert Settings(home=tmp_path).metrics_exposure == "off"


def test_public_metrics_carry_no_verdict_or_disclosure_counts(make_service, sqlite_url):
    public = make_service(sqlite_url, metrics_exposure="public")
    public.init_keys()
    texts = make_texts(public, 1, steps=40)
    assert public.client.post("/v1/verify", headers=public.auth("auditor"), json={"texts": texts}).status_code == 200
    text = public.client.get("/metrics").text
    assert "hero_http_requests_total" in text
    for private in ("hero_verify_texts_total", "hero_disclosures_total", "hero_jobs_total", "hero_job_texts_total",
                    'outcome="watermarked"'):
        assert private not in text, private
    auth = make_service(sqlite_url, metrics_exposure="auth")
    full = auth.client.get("/metrics", headers=auth.auth("admin")).text
    assert 'hero_verify_texts_total{outcome="watermarked"}' in full and "hero_disclosures_total" in full


def test_the_metrics_port_serves_the_public_view():
    from prometheus_client import generate_latest

    from verifier.base.metrics import VERIFY_TEXTS, public_registry

    VERIFY_TEXTS.labels("watermarked").inc()
    text = generate_latest(public_registry()).decode()
    assert "hero_http_requests" in text or "hero_verify_seconds" in text
    assert "hero_verify_texts" not in text
