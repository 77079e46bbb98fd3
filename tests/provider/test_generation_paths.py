"""Every generation path draws with the one step, `gpu/step.FusedSampler.step`, and draws the tokens it drew at
commit 2e5a1fd for fixed keys, logits and generator (tests/vectors/generation_paths.json, made by
tests/vectors/make_generation_vector.py at that commit).

At 2e5a1fd, `HeroWatermarkingConfig` and vLLM ran the fused step; `hero generate`, the SDK's `generate`,
`logits_processor` and `BundleSampler` ran the engine's own step (Python sets), whose fresh draws (unmarked
tokens) took other random numbers. So: the fused paths are unchanged on every spec version; under spec v1 (every
token marked, no repeat in these runs) so are the others; under v2/v3 the others now draw exactly what the fused
path drew at 2e5a1fd on the same inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpu.step import FusedSampler
from tests.vectors import make_generation_vector as G
from verifier.engine.profile import resolve_profile

RECORDED = json.loads((Path(G.__file__).with_name("generation_paths.json")).read_text())
FUSED_AT_BASE = {"engine": "hf_config", "bundle_sampler": "hf_config", "hf_config": "hf_config",
                 "vllm_v1": "vllm_v1", "generate": "generate_hf", "generate_hf": "generate_hf"}


@pytest.fixture(scope="module")
def model():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only contend (10x slower on a loaded 2-core runner)
    yield G.tiny_model(49152)
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", G.PROFILES)
def test_every_path_draws_its_recorded_tokens(name, model):
    profile = resolve_profile(name)
    keyset = G.fixed_keyset(profile)
    was = RECORDED[name]
    for path, fn in G.PATHS.items():
        got = fn(profile, keyset, model) if path.startswith("generate") else fn(profile, keyset)
        assert got == was[FUSED_AT_BASE[path]], (name, path)
        if profile.spec_version == 1 or FUSED_AT_BASE[path] == path:
            assert got == was[path], (name, path)  # the path's own tokens at 2e5a1fd


def test_every_path_calls_the_fused_step(monkeypatch, model):
    """`FusedSampler.step` patched with a counter: each path (hero generate's `generate_watermarked`, the SDK's
    `generate` / `logits_processor` / `BundleSampler`, `HeroWatermarkingConfig`, the vLLM plugin) goes through it."""
    from verifier.provider import generate, logits_processor

    calls: list[int] = []
    real = FusedSampler.step

    def counted(self, logits, *args, **kwargs):
        calls.append(logits.shape[0])
        return real(self, logits, *args, **kwargs)

    monkeypatch.setattr(FusedSampler, "step", counted)
    profile = resolve_profile("v1")
    keyset = G.fixed_keyset(profile)
    bundle = G.opened_bundle(profile, keyset)

    def sdk_generate(profile, keyset, model):
        gens = generate(model, G._Tokenizer(), bundle, G._prompts(profile), G.PAYLOADS, max_new_tokens=3,
                        min_new_tokens=3)
        return [g.token_ids for g in gens]

    def sdk_logits_processor(profile, keyset):
        return G.drive(logits_processor(bundle, G.PAYLOADS, top_k=50), profile)

    paths = {**G.PATHS, "sdk_generate": sdk_generate, "sdk_logits_processor": sdk_logits_processor}
    for path, fn in paths.items():
        calls.clear()
        out = fn(profile, keyset, model) if "generate" in path else fn(profile, keyset)
        assert calls and all(len(row) > 0 for row in out), path
