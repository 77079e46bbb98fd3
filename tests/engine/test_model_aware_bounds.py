"""Model-aware scoring is bounded by construction (engine/model_aware.py): forward passes of at most
`batch_tokens` padded tokens, logits reduced `chunk` positions at a time (never a [len, V] matrix), and a deadline
checked before every layer and chunk. A tiny random Llama (the shipped vocabulary, 2 layers) stands in for the LM:
the same transformers code path as SmolLM2, in milliseconds."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from verifier.base.cancel import Deadline, DecodeStopped, overdue, running
from verifier.engine import model_aware as ma
from verifier.engine import reference
from verifier.engine.profile import default_profile


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def profile():
    return default_profile()


def _texts(n: int, lengths, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 49152, size=k).tolist() for k in lengths[:n]]


def _reference(model, profile, batch):
    """The whole-matrix computation the service used before (text_logits, one text at a time)."""
    out = []
    for text in batch:
        ((_, logits),) = ma.text_logits(model, [text])
        pos = reference.scored_positions(text, profile.context_width)
        t = torch.tensor(pos)
        tokens = torch.tensor([text[p] for p in pos])
        out.append(ma.routing_probabilities(profile, torch.softmax(logits[t - 1].double(), -1), tokens))
    return out


@pytest.mark.slow
def test_chunked_scoring_equals_the_whole_matrix(tiny, profile, monkeypatch):
    batch = _texts(5, [40, 130, 7, 300, 90])
    rows_seen = []
    real = ma.routing_probabilities

    def spy(prof, probs, tokens):
        rows_seen.append(probs.shape[0])
        return real(prof, probs, tokens)

    monkeypatch.setattr(ma, "routing_probabilities", spy)
    got = ma.level_probabilities(tiny, profile, batch, batch_tokens=300, chunk=16)
    monkeypatch.setattr(ma, "routing_probabilities", real)
    want = _reference(tiny, profile, batch)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)
    assert rows_seen and max(rows_seen) <= 16  # never more than one chunk of positions at once


def test_forward_passes_hold_at_most_batch_tokens():
    groups = ma.forward_groups([2048] * 32, 16, 8192)
    assert [len(g) for g in groups] == [4] * 8 and [i for g in groups for i in g] == list(range(32))
    assert ma.forward_groups([10, 10, 5000, 100], 16, 8192) == [[0, 1], [2], [3]]
    assert ma.forward_groups([9000], 16, 8192) == [[0]]  # longer than the budget: alone
    assert ma.forward_groups([5] * 20, 16, 8192) == [list(range(16)), list(range(16, 20))]


@pytest.mark.slow
def test_a_deadline_stops_scoring_within_one_layer(tiny, profile):
    batch = _texts(2, [200, 200])
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DecodeStopped, match="cancelled"):
        ma.level_probabilities(tiny, profile, batch, deadline=Deadline(None, cancel))
    ran = []
    cancel = threading.Event()
    layers = ma._layers(tiny)
    assert len(layers) == 2
    h = layers[0].register_forward_hook(lambda *_: (ran.append(0), cancel.set()))
    try:
        with pytest.raises(DecodeStopped):
            ma.level_probabilities(tiny, profile, batch, deadline=Deadline(60.0, cancel))
    finally:
        h.remove()
    assert ran == [0]  # layer 0 ran, layer 1's check stopped the pass
    assert not any(layer._forward_pre_hooks for layer in layers)  # the checks are removed afterwards
    d = Deadline(0.001, what="model-aware scoring")
    time.sleep(0.01)
    with pytest.raises(DecodeStopped, match=r"deadline of 0\.001 s"):
        ma.level_probabilities(tiny, profile, batch, deadline=d)


def test_the_scorer_refuses_texts_over_its_token_cap(tiny):
    scorer = ma.ModelAwareScorer(lambda name, device, revision: tiny, max_tokens=64)
    scorer.check_lengths([[1] * 64])
    with pytest.raises(ma.TooManyTokens, match=r"text 1 is 65 tokens long.*HERO_MODEL_AWARE_MAX_TOKENS"):
        scorer.check_lengths([[1] * 64, [1] * 65])
    view = scorer.bound(Deadline(1.0))
    assert view.deadline is not None and scorer.deadline is None and view.max_tokens == 64


def test_overdue_counts_work_past_its_deadline():
    assert overdue() == 0
    with running(Deadline(-10.0)):
        assert overdue(grace_s=5.0) == 1
        assert overdue(grace_s=60.0) == 0
    assert overdue() == 0
