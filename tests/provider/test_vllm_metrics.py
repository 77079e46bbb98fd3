"""The vLLM plugin's metrics (verifier/provider/vllm_metrics.py), without vLLM: the bundle gauges follow the bundle
a real BundleKeys serves with (NaN with none), failed refreshes and refused bundles are counted from the bundle
source's log lines, refused rows around a real RequestSlots.step, and all of them reach the default registry's
exposition (what vLLM's /metrics serves)."""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
from prometheus_client import REGISTRY, generate_latest

from tests.provider.test_bundle_keys import _files
from verifier.provider import vllm_metrics
from verifier.provider.step import BundleKeys, RequestSlots


def _value(name: str, labels: dict | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


def _keys(tmp_path, **kw) -> BundleKeys:
    return BundleKeys(tmp_path / "key", tmp_path / "bundle", service_key_file=tmp_path / "service.vkey",
                      provider_id="acme", **kw)


def test_bundle_gauges_follow_the_bundle_in_force(tmp_path):
    _files(tmp_path, ttl=timedelta(hours=2))
    keys = _keys(tmp_path)
    bundle = keys.bundle()
    assert vllm_metrics.in_force(keys) is bundle
    slots = vllm_metrics.watch(RequestSlots(2, "cpu", keys.bundle, stop_token=0), lambda: keys)
    assert isinstance(slots, RequestSlots)
    assert _value("hero_vllm_bundle_expiry_timestamp_seconds") == bundle.expires_at.timestamp()
    assert 7100 < _value("hero_vllm_bundle_expiry_seconds") <= 7200
    assert 0 <= _value("hero_vllm_bundle_age_seconds") < 100
    # past its expires_at (what BundleKeys.bundle() refuses with BundleExpired): negative, still shown
    vllm_metrics.update_bundle(bundle, now=bundle.expires_at + timedelta(seconds=30))
    assert _value("hero_vllm_bundle_expiry_seconds") == -30.0
    vllm_metrics.update_bundle(None)  # no bundle in force: NaN, which no alert's comparison matches
    assert math.isnan(_value("hero_vllm_bundle_expiry_timestamp_seconds"))
    vllm_metrics.update_bundle(bundle)


def test_refused_rows_are_counted_around_the_seams_step(tmp_path):
    _files(tmp_path)
    keys = _keys(tmp_path)
    slots = vllm_metrics.watch(RequestSlots(3, "cpu", keys.bundle, stop_token=0, enforce=True), lambda: keys)
    before = _value("hero_vllm_refused_rows_total") or 0.0
    logits = torch.randn(2, 16)
    out = slots.step(logits, [0, 2])  # enforce mode, no request admitted: both rows forced to stop_token
    assert out[0].argmax() == 0 and out[1].argmax() == 0
    assert _value("hero_vllm_refused_rows_total") == before + 2
    assert slots.admit(1, {"hero": {"model": 1, "user": 2}}, temperature=1.0, prompt=[5, 6, 7])
    slots.step(torch.randn(1, 49152), [1])  # a watermarked row: not refused
    assert _value("hero_vllm_refused_rows_total") == before + 2


def test_refresh_failures_and_refused_bundles_are_counted_from_the_source_log(tmp_path):
    vllm_metrics.metrics()

    def failures(error: str) -> float:
        return _value("hero_vllm_bundle_refresh_failures_total", {"error": error}) or 0.0

    before = failures("BundleFetchError"), failures("ConnectError"), _value("hero_vllm_bundles_refused_total") or 0
    log = logging.getLogger("hero.provider")
    log.warning("bundle refresh failed", extra={"error": "BundleFetchError"})
    log.warning("bundle %s refused: %s; %s", "b1", "a bundle never goes back", "b0 stays in use")
    log.warning("something else")
    _files(tmp_path)
    keys = _keys(tmp_path, url="http://127.0.0.1:9", token_file=tmp_path / "token", refresh_s=3600)
    try:  # the service unreachable at start: the file bundle serves, the failed poll is counted
        assert keys.bundle() is not None
    finally:
        keys._source.stop()
    assert failures("BundleFetchError") == before[0] + 1
    assert failures("ConnectError") == before[1] + 1
    assert _value("hero_vllm_bundles_refused_total") == before[2] + 1


def test_the_metrics_are_in_the_default_registrys_exposition():
    vllm_metrics.metrics()
    body = generate_latest(REGISTRY).decode()
    for name in ("hero_vllm_bundle_age_seconds", "hero_vllm_bundle_expiry_seconds",
                 "hero_vllm_bundle_expiry_timestamp_seconds", "hero_vllm_refused_rows_total",
                 "hero_vllm_bundles_refused_total", "# TYPE hero_vllm_bundle_refresh_failures_total counter"):
        assert name in body, name


def test_the_plugin_hooks_its_slots_in():
    """verifier/provider/vllm.py (not importable without vLLM) hands its RequestSlots to `watch`."""
    from pathlib import Path

    source = (Path(vllm_metrics.__file__).parent / "vllm.py").read_text()
    assert "from verifier.provider.vllm_metrics import watch" in source and "return watch(RequestSlots(" in source


def test_a_failing_keys_getter_never_stops_the_gauges():
    vllm_metrics.watch(SimpleNamespace(step=lambda *a, **k: None, refused=[]), lambda: 1 / 0)
    vllm_metrics._refresh_gauges()  # logged at debug, not raised


@pytest.fixture(autouse=True)
def _forget_watched_keys():
    yield
    with vllm_metrics._LOCK:
        vllm_metrics._KEYS.clear()
