"""`HeroWatermarkingConfig`: transformers' `watermarking_config` with its own top-k / top-p left on."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest
import torch

from tests.provider.test_sdk import _bundle
from verifier.engine.decoder import Decoder
from verifier.engine.payload import PayloadError
from verifier.engine.profile import default_profile
from verifier.provider import HeroWatermarkingConfig

TOKENS = 200


def _secrets(bundle) -> list[str]:
    """Every form a key could leak in: hex and the int64 words the sampler holds."""
    out = []
    for table in bundle.keyset.tables:
        for k in table.entries[:8]:
            out += [k.hex(), str(int.from_bytes(k[:8], "little", signed=True)), str(int.from_bytes(k[:8], "little"))]
    pos = bundle.keyset.position
    return [*out, pos.hex(), str(int.from_bytes(pos[:8], "little", signed=True))]


def test_config_shows_no_key_material_and_cannot_be_pickled():
    _, bundle = _bundle(default_profile())
    cfg = HeroWatermarkingConfig(bundle, [{"model": 1, "user": 2}])
    shown = " ".join([repr(cfg), str(cfg.to_dict()), cfg.to_json_string(), str(dict(cfg))])
    for s in _secrets(bundle):
        assert s not in shown
    assert cfg.to_dict() == {"watermark": "hero", "bundle_id": bundle.bundle_id, "profile": bundle.profile.name,
                             "key_versions": {"1": "l1-v2", "2": "l2-v2"}, "rows": 1}
    assert copy.deepcopy(cfg) is cfg
    with pytest.raises(TypeError):
        pickle.dumps(cfg)
    with pytest.raises(PayloadError):
        HeroWatermarkingConfig(bundle, [{"model": 1}])


def test_generation_config_serialises_without_keys():
    from transformers import GenerationConfig

    _, bundle = _bundle(default_profile())
    gc = GenerationConfig(do_sample=True, top_k=50, watermarking_config=HeroWatermarkingConfig(bundle, [{"model": 1,
                                                                                                       "user": 2}]))
    text = gc.to_json_string()
    assert '"watermark": "hero"' in text
    for s in _secrets(bundle):
        assert s not in text


@pytest.mark.slow
@pytest.mark.model
def test_generate_with_top_k_top_p_decodes_exactly(smollm2, caplog):
    model, tok = smollm2
    from verifier.engine.keys import KeySet, derive_level_table

    profile = default_profile()
    # fixed keys (with the seeded generator: the same texts every run). With fresh keys an unlucky key set gave
    # a weak text now and then (CI, 2026-11-28: p 1.5e-5 and 7e-3 on 200-token top-k/p texts)
    fixed = KeySet(tuple(derive_level_table(bytes([lv]) * 32, profile, lv, f"l{lv}-v2")
                         for lv in range(1, profile.depth + 1)))
    keyset, bundle = _bundle(profile, fixed)
    payloads = [{"model": 37, "user": 1234}, {"model": 4000, "user": 7}]
    cfg = HeroWatermarkingConfig(bundle, payloads, generator=torch.Generator().manual_seed(3))
    prompts = ["The history of the printing press", "A recipe for a quick weeknight dinner"]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    caplog.set_level(logging.DEBUG)
    with torch.no_grad():
        out = model.generate(**enc, watermarking_config=cfg, do_sample=True, top_k=50, top_p=0.9,
                             max_new_tokens=TOKENS, min_new_tokens=TOKENS, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    for r, p in zip(dec.decode_texts(texts, tok), payloads, strict=True):
        assert r.watermarked and r.p_value < 1e-6, r
        # Never a wrong value. Keys are fresh each run, and at top-k 50 / top-p 0.9 a text may withhold the user
        # (exact user at 200 tokens is ~0.8-0.9 there: docs/evaluation), so None is allowed, a third user is not.
        assert r.levels[1].fields["user"] in (p["user"], None), r
        assert r.levels[0].status != "decoded" or r.levels[0].fields["model"] == p["model"], r
    logged = caplog.text
    for s in _secrets(bundle):
        assert s not in logged


@pytest.mark.slow
@pytest.mark.model
def test_warpers_stay_transformers_own(smollm2):
    """With top_k=1 transformers leaves one token per row: the watermark must return exactly that token."""
    model, tok = smollm2
    _, bundle = _bundle(default_profile())
    cfg = HeroWatermarkingConfig(bundle, [{"model": 1, "user": 2}])
    enc = tok(["Once upon a time"], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        greedy = model.generate(**enc, do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                pad_token_id=tok.pad_token_id)
        marked = model.generate(**enc, watermarking_config=cfg, do_sample=True, top_k=1, max_new_tokens=12,
                                min_new_tokens=12, pad_token_id=tok.pad_token_id)
    assert torch.equal(greedy, marked)


@pytest.mark.slow
def test_bench_generate_alternates_plain_hero_and_synthid():
    """`hero bench generate` (fused path) on the random-weight SmolLM2 shape: every variant timed, same run
    (with the C kernel: also HeRo on the exact step alone, and the fast path switched back on afterwards)."""
    from gpu import cpu_kernel
    from verifier.cli.bench_figures import RANDOM_MODEL, generate_overhead_figures

    native = cpu_kernel.load()
    f = generate_overhead_figures(2, tokens=2, reps=1, model_name=RANDOM_MODEL, top_k=50, top_p=0.9, synthid=True,
                                  exact_step=native is not None)
    assert f["batch"] == 2 and f["tokens"] == 2 and f["path"] == "fused"
    want = {"plain", "hero", "synthid"} | ({"hero-exact-step"} if native is not None else set())
    assert set(f["seconds_per_step"]) == want
    if native is not None:
        assert f["exact_step_ms_per_step"] > 0 and native.fast_step() is True
    assert all(f[k] > 0 for k in ("plain_ms_per_step", "hero_ms_per_step", "synthid_ms_per_step"))
    assert f["overhead_pct"] == pytest.approx(100 * (f["hero_ms_per_step"] / f["plain_ms_per_step"] - 1))
    times = f["seconds_per_step"]  # one repetition: the paired ratio is that pair's
    assert f["overhead_pct_paired"] == pytest.approx(100 * (times["hero"]["median"] / times["plain"]["median"] - 1))
