"""The chat setting of `hero eval`: SynthID-Text's top-k processor and binomial test, the chat template, and
the section end to end on a tiny configuration."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

from hero_eval.baselines.synthid import (
    SynthIDDetector,
    TopKSynthIDLogitsProcessor,
    processor_for,
    synthid_config,
    synthid_keys,
)

VOCAB = 300


def _stock(keys):
    return synthid_config(keys).construct_processor(vocab_size=VOCAB, device=torch.device("cpu"))


def test_topk_processor_draws_from_the_stock_distribution() -> None:
    """Same next-token probabilities as transformers' processor after top-k / top-p, step after step (the
    context state and the repeated-context rule included: the token sequence repeats a context)."""
    keys = synthid_keys(1)
    warp = LogitsProcessorList([TopKLogitsWarper(12), TopPLogitsWarper(0.9)])
    stock, fast = _stock(keys), TopKSynthIDLogitsProcessor.from_config(synthid_config(keys), 12)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (3, 6), generator=gen)
    worst, steps = 0.0, 0
    for step in range(14):
        logits = torch.randn(3, VOCAB, generator=gen) * 3
        scores = warp(ids, logits)
        a = torch.softmax(stock(ids, scores.clone()), -1)
        b = torch.softmax(fast(ids, scores.clone()), -1)
        worst = max(worst, float((a - b).abs().max()))
        steps += 1
        nxt = torch.multinomial(b, 1) if step < 7 else ids[:, -5:-4]  # later steps repeat earlier contexts
        ids = torch.cat([ids, nxt], 1)
    assert steps == 14 and worst < 1e-6
    # and the watermark changed the distribution (the comparison is not between two untouched rows)
    plain = torch.softmax(warp(ids, torch.randn(3, VOCAB, generator=gen)), -1)
    assert float((TopKSynthIDLogitsProcessor.from_config(synthid_config(keys), 12)(ids, torch.log(plain)).softmax(-1)
                  - plain).abs().max()) > 1e-3


def test_topk_processor_falls_back_to_the_stock_call_without_topk() -> None:
    keys = synthid_keys(2)
    p = processor_for(keys, LogitsProcessorList())
    assert type(p.watermark).__name__ == "SynthIDTextWatermarkLogitsProcessor"
    q = processor_for(keys, LogitsProcessorList([TopKLogitsWarper(50)]))
    assert isinstance(q.watermark, TopKSynthIDLogitsProcessor) and q.watermark.top_k == 50


def test_binomial_test_is_calibrated_on_random_tokens() -> None:
    """Null p-values (random tokens, no key touched them) are close to uniform, conservative in the tail."""
    det = SynthIDDetector(synthid_keys(3))
    rng = random.Random(0)
    texts = [[rng.randrange(VOCAB) for _ in range(30)] for _ in range(300)]
    p = np.array([s.p_value for s in det.score(texts)])
    assert all(s.entries > 0 for s in det.score(texts[:5]))
    assert stats.kstest(p, "uniform").statistic < 0.1
    assert (p <= 0.05).mean() <= 0.05 + 0.03
    assert (p <= 0.5).mean() > 0.35  # not degenerate (e.g. all p = 1)


def test_binomial_test_detects_watermarked_draws_and_not_another_key() -> None:
    """Tokens drawn through the processor (a flat top-k distribution: maximal entropy) are detected; the same
    tokens scored with other keys are not."""
    keys = synthid_keys(4)
    proc = processor_for(keys, LogitsProcessorList([TopKLogitsWarper(40)]))
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (8, 4), generator=gen)
    for _ in range(40):
        scores = proc(ids, torch.randn(8, VOCAB, generator=gen) * 0.1)
        ids = torch.cat([ids, torch.multinomial(torch.softmax(scores, -1), 1, generator=gen)], 1)
    texts = ids[:, 4:].tolist()
    good = [s.p_value for s in SynthIDDetector(keys).score(texts)]
    wrong = [s.p_value for s in SynthIDDetector(synthid_keys(4, "other")).score(texts)]
    assert max(good) < 1e-6
    assert min(wrong) > 1e-3


def test_repeated_context_and_eos_are_masked() -> None:
    det = SynthIDDetector(synthid_keys(5), eos_token_id=7)
    once = det.score([[1, 2, 3, 4, 5, 6]])[0]
    assert once.entries == 2 * 30
    repeated = det.score([[1, 2, 3, 4, 5, 1, 2, 3, 4, 5]])[0]  # the context 1 2 3 4 comes again
    assert repeated.entries == 5 * 30
    assert det.score([[1, 2, 3, 4, 5, 7, 8, 9]])[0].entries == 1 * 30


def test_fast_masks_equal_the_stock_masks() -> None:
    from hero_eval.baselines.synthid import context_mask

    stock = _stock(synthid_keys(6))
    rng = random.Random(1)
    for _ in range(30):
        ids = [rng.randrange(6) for _ in range(rng.randrange(5, 40))]  # a 6-token vocabulary: contexts repeat
        t = torch.tensor([ids])
        want = (stock.compute_context_repetition_mask(t)[0].bool() & stock.compute_eos_token_mask(t, 5)[0, 4:].bool())
        assert context_mask(ids, 5, 5, stock.context_history_size) == want.tolist()


@pytest.mark.model
def test_chat_template_is_applied(smollm2) -> None:
    from hero_eval.chat import chat_template

    _, tok = smollm2
    (text,) = chat_template(tok, ["How do magnets work?"])
    assert "<|im_start|>user\nHow do magnets work?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant: special tokens


@pytest.mark.slow
@pytest.mark.model
def test_chat_section_end_to_end(smollm2, tmp_path, request) -> None:
    """`hero eval --sections chat` on a tiny configuration: every row of the report has its figures."""
    from hero_eval.runner import Config, Runner

    model, tok = smollm2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as `hero eval --threads 1`: one thread is fastest on a loaded machine
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    cfg = Config(sections=("chat",), prompts=3, humans=6, tokens=50, batch_size=3, natural_prompts=2,
                 natural_tokens=24, chat_aware_humans=3, chat_cost_rounds=1, out=str(tmp_path / "out"),
                 attr_plan=dict(div_prompts=1, repeats=3, div_tokens=6, users=2, cost_texts=2))
    results = Runner(cfg, model, tok).run()
    assert not results.get("errors"), results.get("errors")
    extra = results["cells"]["chat"]["chat"]["extra"]["k50p0.9"]
    assert {"HeRo-v3", "HeRo-v3 (model-aware)", "SynthID-Text", "unwatermarked"} <= set(extra)
    assert extra["SynthID-Text"]["detect"]["50"]["p_le_alpha"]["n"] == 3
    assert extra["HeRo-v3"]["moderator"]["50"]["p_le_alpha"]["n"] == 3
    assert extra["SynthID-Text"]["calibration"]["wrong_keys"]["n"] == 27
    assert 0 < extra["unwatermarked"]["entropy"]["mean"] < 12
    assert extra["HeRo-v3"]["natural"]["n"] == 2 and max(extra["HeRo-v3"]["natural"]["lengths"]) <= 24
    cost = results["cells"]["chat"]["chat"]["generation_cost"]["k50p0.9"]["cpu_ms_per_token"]
    assert {"HeRo-v3", "SynthID-Text", "SynthID-Text (stock processor)", "unwatermarked"} <= set(cost)
    att = results["cells"]["chat"]["chat"]["attribution"]["k50p0.9"]
    assert att["HeRo-v3"]["prefix"]["50"]["exact"]["n"] == 3
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "chat" in saved["cells"]
    assert (tmp_path / "out" / "tables.md").read_text().startswith("# ")


def test_ks_sides_tell_anticonservative_from_conservative() -> None:
    """The report says which side a KS departure is on: too many small p-values (false alarms) is flagged by
    `ks_p_small`, too few (power lost, calibration kept) by `ks_p_large`; uniform p-values by neither."""
    from hero_eval.attribution_eval import ks_uniform
    from hero_eval.report_chat import ks_text

    rng = np.random.default_rng(0)
    u = rng.uniform(size=2000)
    uniform, small, large = ks_uniform(u), ks_uniform(u**1.3), ks_uniform(u**0.7)
    assert uniform["ks_p_small"] > 0.01 and uniform["ks_p_large"] > 0.01
    assert small["ks_p_small"] < 1e-6 and small["ks_p_large"] > 0.5
    assert large["ks_p_large"] < 1e-6 and large["ks_p_small"] > 0.5
    assert small["p_le_0.1"] > 0.1 > large["p_le_0.1"]
    assert "too many small p: KS p = " in ks_text(small)
