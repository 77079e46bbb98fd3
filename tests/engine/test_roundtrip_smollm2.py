"""Real round trip: SmolLM2-135M on BBC prompts, default profile, 200 new tokens, T = 1, decoded from
re-tokenized text (what a verifier receives). Human BBC text must not be detected."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article
from tests.helpers.keys import make_keyset
from verifier.engine.decoder import Decoder
from verifier.engine.profile import default_profile
from verifier.provider.generation import generate_watermarked

pytestmark = [pytest.mark.model, pytest.mark.slow]
N_PROMPTS, N_HUMANS, NEW_TOKENS = 16, 200, 200


def _generate(model, tok, prompts, payloads, profile, keyset, **kw):
    """Exactly NEW_TOKENS new tokens per prompt (no early end of text)."""
    return generate_watermarked(
        model, tok, prompts, payloads, profile, keyset, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **kw
    )


@pytest.fixture(scope="module")
def setup(smollm2):
    model, tok = smollm2
    profile = default_profile()
    keyset = make_keyset(profile)
    arts, humans = bbc_prompts_and_humans(N_PROMPTS, N_HUMANS, seed=0)
    prompts = [prompt_from_article(a.text, tok, 50) for a in arts]
    rng = np.random.default_rng(0)
    payloads = [{"model": int(rng.integers(4096)), "user": int(rng.integers(4096))} for _ in prompts]
    gens = _generate(model, tok, prompts, payloads, profile, keyset, generator=torch.Generator().manual_seed(1))
    return model, tok, profile, keyset, prompts, payloads, gens, humans


def test_bit_accuracy_from_retokenized_text(setup):
    _, tok, profile, keyset, _, payloads, gens, _ = setup
    assert all(len(g.token_ids) == NEW_TOKENS for g in gens)
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    results = dec.decode_texts([g.text for g in gens], tok)
    exact = released1 = 0
    for r, p in zip(results, payloads, strict=True):
        assert r.watermarked and r.p_value < 1e-6
        # spec v2: a released value is the one the text carries, never a near miss
        for lv, name in ((1, "model"), (2, "user")):
            level = r.levels[lv - 1]
            assert level.status in ("decoded", "detected", "absent") and level.fields[name] in (p[name], None)
        exact += r.levels[1].fields["user"] == p["user"]
        released1 += r.levels[0].status == "decoded"
    print(f"\nSmolLM2 round trip (200 tokens): exact user {exact}/{len(results)}, model released {released1}/"
          f"{len(results)}; max p {max(r.p_value for r in results):.2e}")
    assert len(results) >= 16 and exact >= len(results) - 1  # whole-value ML: >= 0.999 expected at 200 tokens
    # the public-only verifier sees level 1 only, and still detects
    public = Decoder(profile, {1: [keyset.tables[0]]}).decode_texts([g.text for g in gens], tok)
    assert all(len(r.levels) == 1 for r in public)
    missed = [(i, f"{r.p_value:.1e}", r.tokens_scored, len(set(gens[i].token_ids)), f"{results[i].p_value:.1e}")
              for i, r in enumerate(public) if not r.watermarked]
    # At most one text in 16 (as for the exact user above): a sampled answer can loop, and repeated contexts are
    # unmarked. 2026-12-06: no miss in 240 texts over 15 runs (public p <= 2e-21); one CI run had a text at
    # p = 4e-12 with both levels and the public level alone missed it.
    assert len(missed) <= 1, f"public level alone missed (text, p, tokens scored, distinct ids, p with both): {missed}"


def test_human_text_pvalues_uniform(setup):
    _, tok, profile, keyset, _, _, _, humans = setup
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    p = np.array([r.p_value for r in dec.decode_texts([h.body for h in humans], tok)])
    print(f"\nhuman BBC: n={len(p)} min p {p.min():.3g}, KS p {sps.kstest(p, 'uniform').pvalue:.3g}")
    assert len(p) >= 200
    assert (p < 1e-3).sum() <= 4  # Bin(200, 1e-3): P[X >= 5] ~ 2e-6 (fresh keys every run)
    assert sps.kstest(p, "uniform").pvalue > 1e-6  # a false failure in 1e-6 of runs


def _mean_nll(model, tok, prompt: str, ids: list[int]) -> float:
    p = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    full = torch.cat([p, torch.tensor([ids])], dim=1)
    with torch.no_grad():
        logits = model(full).logits[0, p.shape[1] - 1 : -1]
    return float(torch.nn.functional.cross_entropy(logits.float(), torch.tensor(ids)))


def test_perplexity_unchanged(setup):
    model, tok, profile, keyset, prompts, payloads, gens, _ = setup
    plain = _generate(model, tok, prompts, payloads, profile, keyset, watermark=False)
    wm = np.array([_mean_nll(model, tok, g.prompt, g.token_ids) for g in gens])
    un = np.array([_mean_nll(model, tok, g.prompt, g.token_ids) for g in plain])
    t = sps.ttest_rel(wm, un)
    print(f"\nPPL watermarked {math.exp(wm.mean()):.2f} vs plain {math.exp(un.mean()):.2f}; paired t p={t.pvalue:.3f}")
    assert t.pvalue > 1e-3
