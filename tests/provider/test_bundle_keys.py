"""BundleKeys (verifier/provider/step.py), an engine's bundle: built once at engine start, the file bundle serves
when the verifier is unreachable (no fetch waited on per request), an expired bundle stops watermarked
generation until a fresh one is installed, and a rotation that changes the profile's shape is refused at refresh
(the bundle in force serves on until it expires)."""

from __future__ import annotations

import base64
import dataclasses
import logging
import time
from datetime import timedelta

import httpx
import pytest

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.profile import Field, default_profile
from verifier.provider.bundle import BundleExpired, GenerationBundle, generate_keypair, open_bundle
from verifier.provider.step import BundleKeys, RequestSlots, validate_payload


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
        slots = RequestSlots(2, "cpu", keys.bundle, stop_token=0)
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


# --- rotations that change the profile's shape -------------------------------------------------------------------


class _Service:
    """A stand-in `POST /v1/keys/generation-bundle`: unreachable until a bundle is set; 304 for its ETag."""

    def __init__(self) -> None:
        self.bundle: bytes | None = None
        self.etag = ""
        self.asked: list[str | None] = []  # the If-None-Match of each poll

    def offer(self, profile, keyset, pk: bytes, bundle_id: str, ttl: timedelta = timedelta(hours=1)) -> None:
        hdr = bundles.header(profile, keyset, bundle_id=bundle_id, ttl=ttl)
        hdr["etag"] = self.etag = f"etag-{bundle_id}"
        self.bundle = bundles.signed(hdr, keyset, pk)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.bundle is None:
            raise httpx.ConnectError("unreachable", request=request)
        self.asked.append(request.headers.get("if-none-match"))
        if request.headers.get("if-none-match") == f'"{self.etag}"':
            return httpx.Response(304)
        return httpx.Response(200, json={"bundle": base64.b64encode(self.bundle).decode()})


@pytest.fixture
def service(monkeypatch) -> _Service:
    """BundleKeys' BundleSource talks to the stand-in (its httpx client gets a mock transport)."""
    svc = _Service()
    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real(**kw, transport=httpx.MockTransport(svc.handle)))
    return svc


def _keys(tmp_path) -> BundleKeys:
    return BundleKeys(tmp_path / "key", tmp_path / "bundle", url="http://hero.test", token_file=tmp_path / "token",
                      refresh_s=3600, service_key_file=tmp_path / "service.vkey", provider_id=bundles.PROVIDER)


def _wide(profile):
    """The profile on Gemma-3's vocabulary: same levels, another logits width."""
    return dataclasses.replace(profile, name="wide", vocab_size=262144, tokenizer="gemma3-270m")


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]


def test_a_rotation_that_changes_the_shape_is_refused_at_refresh_and_the_bundle_in_force_serves(
        tmp_path, service, caplog, monkeypatch):
    """A refreshed bundle on another vocabulary: one warning line naming what differs, the engine keeps its bundle
    (new requests, admission) until that one expires, then a clear error per request; a same-shape rotation then
    swaps in."""
    profile, _, _, pk = _files(tmp_path)
    keys = _keys(tmp_path)  # the service is unreachable at start: the file bundle serves
    try:
        slots = RequestSlots(3, "cpu", keys.bundle, stop_token=0)
        assert slots.add(0, {"model": 1, "user": 2})
        service.offer(_wide(profile), make_keyset(_wide(profile)), pk, "wide")
        caplog.set_level(logging.WARNING, logger="hero.provider")
        assert keys._source.refresh() is False
        assert keys.bundle().bundle_id == "file-bundle"
        assert slots.add(1, {"model": 1, "user": 2}) and 1 not in slots.errors
        validate_payload({"model": 1, "user": 2}, 1.0, keys.bundle)
        [line] = _refusals(caplog)
        assert "bundle wide refused" in line and "vocab_size 49152 -> 262144" in line and "tokenizer smollm2" in line
        assert "stays in use until it expires" in line and "\n" not in line
        # the next poll names the refused bundle: 304, no second line, nothing opened
        assert keys._source.refresh() is False
        assert service.asked[-1] == '"etag-wide"' and keys._source.not_modified == 1 and len(_refusals(caplog)) == 1

        later = keys.bundle().expires_at + timedelta(seconds=1)
        real = GenerationBundle.expired
        monkeypatch.setattr(GenerationBundle, "expired", lambda self, now=None: real(self, now or later))
        with pytest.raises(BundleExpired, match=r"file-bundle expired at .*stopped.*bundle wide refused: .*vocab_size"):
            keys.bundle()
        assert not slots.add(2, {"model": 1, "user": 2}) and slots.errors[2] == "BundleExpired"

        # the service rotates within the engine's shape: installed, watermarking resumes with the new tables
        service.offer(profile, make_keyset(profile, seed=5), pk, "same", ttl=timedelta(hours=2))
        old = slots.sampler
        assert keys._source.refresh() is True
        assert keys.bundle().bundle_id == "same" and keys._source.refused is None
        assert slots.add(2, {"model": 1, "user": 2}) and slots.sampler is not old
        assert slots.samplers[0] is old  # a running request keeps the tables it started with
    finally:
        keys._source.stop()


def test_at_start_a_service_bundle_of_another_shape_leaves_the_file_bundle_serving(tmp_path, service, caplog):
    profile, _, _, pk = _files(tmp_path)
    service.offer(_wide(profile), make_keyset(_wide(profile)), pk, "wide")
    caplog.set_level(logging.WARNING, logger="hero")
    keys = _keys(tmp_path)
    try:
        assert keys.bundle().bundle_id == "file-bundle"
        assert len(_refusals(caplog)) == 1 and "unreachable" not in caplog.text
    finally:
        keys._source.stop()


def test_without_a_file_bundle_the_first_fetched_fixes_the_shape(tmp_path, service, caplog):
    """Spec v4: a bundle whose issued list grew (a newly issued model id) is the same shape and swaps in; one with
    another routing or another field is refused."""
    from verifier.engine.profile import resolve_profile

    _, _, _, pk = _files(tmp_path)
    (tmp_path / "bundle").unlink()
    v4 = resolve_profile("v4")
    keyset = make_keyset(v4)
    service.offer(v4, keyset, pk, "first")
    keys = _keys(tmp_path)
    try:
        assert keys.bundle().bundle_id == "first"
        level = dataclasses.replace(v4.levels[0], issued=(*v4.levels[0].issued, 9))
        grown = dataclasses.replace(v4, levels=(level, *v4.levels[1:]))
        service.offer(grown, keyset, pk, "grown")
        assert keys._source.refresh() is True and keys.bundle().profile.levels[0].issued[-1] == 9
        caplog.set_level(logging.WARNING, logger="hero.provider")
        for name, other in (("interleaved", dataclasses.replace(v4, routing="interleaved")),
                            ("renamed", dataclasses.replace(v4, levels=(v4.levels[0], dataclasses.replace(
                                v4.levels[1], fields=(Field("account", 12),)))))):
            service.offer(other, keyset, pk, name)
            assert keys._source.refresh() is False and keys.bundle().bundle_id == "grown", name
        lines = _refusals(caplog)
        assert len(lines) == 2 and "routing contiguous -> interleaved" in lines[0]
        assert "[user:12] -> " in lines[1] and "[account:12]" in lines[1]
    finally:
        keys._source.stop()


def test_slots_refuse_a_shape_change_from_a_source_that_lets_it_through():
    """Another engine's bundle callable (not BundleKeys): the request is left unwatermarked, the reason says so."""
    from tests.vectors.make_generation_vector import fixed_keyset, opened_bundle
    from verifier.engine.profile import v1_profile

    profile = v1_profile()
    current = [opened_bundle(profile, fixed_keyset(profile))]
    slots = RequestSlots(2, "cpu", lambda: current[0], stop_token=0)
    assert slots.add(0, {"model": 1, "user": 2})
    wide = _wide(profile)
    current[0] = dataclasses.replace(opened_bundle(wide, fixed_keyset(wide)), bundle_id="other")
    assert not slots.add(1, {"model": 1, "user": 2}) and slots.errors[1] == "ValueError"
    with pytest.raises(ValueError, match=r"not the profile's shape: bundle other: .*vocab_size"):
        slots._current()
