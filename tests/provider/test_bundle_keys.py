"""BundleKeys (verifier/provider/step.py), an engine's bundle: built once at engine start, the file bundle serves
when the verifier is unreachable (no fetch waited on per request), and an expired bundle stops watermarked
generation until a fresh one is installed."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.profile import default_profile
from verifier.provider.bundle import BundleExpired, GenerationBundle, generate_keypair, open_bundle
from verifier.provider.step import BundleKeys, RequestSlots


def _files(tmp_path, ttl: timedelta = timedelta(hours=1), bundle_id: str = "file-bundle"):
    profile = default_profile()
    keyset = make_keyset(profile)
    sk, pk = generate_keypair()
    (tmp_path / "bundle").write_bytes(bundles.signed(bundles.header(profile, keyset, bundle_id=bundle_id, ttl=ttl),
                                                     keyset, pk))
    (tmp_path / "key").write_bytes(sk)
    (tmp_path / "service.vkey").write_text(bundles.SERVICE_VKEY + "\n")
    (tmp_path / "token").write_text("not-a-real-token\n")
    return profile, keyset, sk, pk


def test_unreachable_verifier_falls_back_to_the_file_bundle_without_waiting(tmp_path):
    _files(tmp_path)
    t0 = time.monotonic()
    keys = BundleKeys(tmp_path / "key", tmp_path / "bundle", url="http://127.0.0.1:9", token_file=tmp_path / "token",
                      refresh_s=3600, service_key_file=tmp_path / "service.vkey", provider_id=bundles.PROVIDER)
    try:
        assert keys.bundle().bundle_id == "file-bundle"
        t1 = time.monotonic()
        for _ in range(100):  # per request: never a fetch
            assert keys.bundle().bundle_id == "file-bundle"
        assert time.monotonic() - t1 < 0.5, "bundle() waited on the service"
        assert keys._source is not None and keys._source.polls == 1  # the one attempt at start
        assert t1 - t0 < 15
    finally:
        keys._source.stop()


def test_unreachable_verifier_without_a_file_bundle_stops_the_engine_at_start(tmp_path):
    _files(tmp_path)
    (tmp_path / "bundle").unlink()
    with pytest.raises(httpx.ConnectError):  # the first fetch
        BundleKeys(tmp_path / "key", tmp_path / "bundle", url="http://127.0.0.1:9", token_file=tmp_path / "token",
                   service_key_file=tmp_path / "service.vkey", provider_id=bundles.PROVIDER)


def test_expired_bundle_stops_watermarked_generation_and_a_refresh_resumes_it(tmp_path, monkeypatch):
    profile, keyset, sk, pk = _files(tmp_path)
    keys = BundleKeys(tmp_path / "key", tmp_path / "bundle", url="http://127.0.0.1:9", token_file=tmp_path / "token",
                      refresh_s=3600, service_key_file=tmp_path / "service.vkey", provider_id=bundles.PROVIDER)
    try:
        slots = RequestSlots(2, "cpu", keys.bundle)
        assert slots.add(0, {"model": 1, "user": 2})
        file_bundle = keys.bundle()
        # The clock passes the file bundle's expires_at (an hour from now).
        later = file_bundle.expires_at + timedelta(seconds=1)
        real = GenerationBundle.expired
        monkeypatch.setattr(GenerationBundle, "expired", lambda self, now=None: real(self, now or later))
        with pytest.raises(BundleExpired, match=r"expired at .*watermarked generation is stopped"):
            keys.bundle()
        assert not slots.add(1, {"model": 1, "user": 2}) and slots.errors[1] == "BundleExpired"
        # A poll installs a fresh bundle (valid past that time): generation resumes with it.
        fresh = bundles.signed(bundles.header(profile, keyset, bundle_id="fresh", ttl=timedelta(hours=2)), keyset, pk)
        opened = open_bundle(fresh, sk, service_key=bundles.SERVICE_VKEY, provider_id=bundles.PROVIDER)
        with keys._source._lock:
            keys._source._bundle = opened
        assert keys.bundle().bundle_id == "fresh"
        assert slots.add(1, {"model": 1, "user": 2}) and 1 not in slots.errors
    finally:
        keys._source.stop()


def test_every_generation_path_refuses_an_expired_bundle(monkeypatch):
    """BundleSampler.step, logits_processor, generate, HeroWatermarkingConfig and BundleSource: BundleExpired."""
    import torch

    from tests.vectors.make_generation_vector import fixed_keyset, opened_bundle
    from verifier.engine.profile import v1_profile
    from verifier.provider.hf import HeroWatermarkingConfig
    from verifier.provider.refresh import BundleSource
    from verifier.provider.sampling import BundleSampler, RequestState, generate, logits_processor

    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    sampler = BundleSampler(bundle)
    args = (torch.zeros(1, profile.vocab_size), torch.zeros(1, profile.context_width, dtype=torch.int64),
            sampler.payload({"model": 1, "user": 2}).unsqueeze(0))
    sampler.step(*args, [RequestState()])  # fresh: draws
    monkeypatch.setattr(GenerationBundle, "expired", lambda self, now=None: True)
    with pytest.raises(BundleExpired, match="expired at"):
        sampler.step(*args, [RequestState()])
    with pytest.raises(BundleExpired):
        logits_processor(bundle, [{"model": 1, "user": 2}])
    with pytest.raises(BundleExpired):
        generate(None, None, bundle, ["x"], [{"model": 1, "user": 2}])
    with pytest.raises(BundleExpired):
        HeroWatermarkingConfig(bundle, [{"model": 1, "user": 2}])
    source = BundleSource(b"\0" * 32, "t", service_key=bundles.SERVICE_VKEY, base_url="http://127.0.0.1:9",
                          timeout_s=2)
    source._bundle = bundle  # installed earlier; the verifier is unreachable now
    with pytest.raises(BundleExpired):
        source.bundle
