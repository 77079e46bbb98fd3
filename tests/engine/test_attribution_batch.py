"""The batched attribution decision (engine/attribution.py: every text's tails as arrays) against the
per-text scalar rule it replaced (tests/helpers/attribution_scalar.py, the spec section 13 rule written
one region and one cell at a time): same status, value, candidates, spans and p-values for every text,
whatever else shares its batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.helpers import attribution_scalar as scalar
from verifier.engine import attribution, stats

ALPHA = 1e-4


def _evidence(rng: np.random.Generator, b: int, windows: int, cells: int, c: int, k: int, per_value: bool):
    """Window scores [b, W, cells, C] and counts [b, W, K] of texts of every kind: no tokens, unmarked
    (Gamma(n, 1) everywhere), one source, and two sources spliced at a random window (marks of strength
    0-3 per token, so that every status, weak marks included, occurs)."""
    counts = rng.integers(0, 72 // windows + 1, size=(b, windows, k))  # ~36 tokens per cell in all
    counts[rng.random(b) < 0.05] = 0  # texts without scored tokens
    counts[:, :, :][rng.random((b, windows, k)) < 0.05] = 0  # empty cells and windows
    n_cell = counts.sum(2, keepdims=True) if per_value else counts  # [b, W, cells]
    scores = rng.gamma(np.maximum(n_cell, 1e-9)[..., None] * np.ones(c), 1.0) * (n_cell[..., None] > 0)
    for i in range(b):
        kind = rng.integers(0, 3 if windows > 1 else 2)  # 0 unmarked, 1 one source, 2 two sources
        if kind == 0:
            continue
        cut = int(rng.integers(1, windows)) if kind == 2 else windows
        strength = rng.uniform(0.0, 3.0, size=2)
        for part, (lo, hi) in enumerate([(0, cut), (cut, windows)]):
            if hi <= lo:
                continue
            value = rng.integers(0, c, size=cells)
            for cell in range(cells):
                scores[i, lo:hi, cell, value[cell]] += strength[part] * n_cell[i, lo:hi, cell]
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(counts, dtype=torch.int64)


def _same(a: attribution.Attribution, b: scalar.Attribution) -> None:
    assert a.status == b.status
    assert a.value == b.value
    assert a.most_likely == b.most_likely
    assert math.isclose(a.log_p, b.log_p, rel_tol=1e-9, abs_tol=1e-12)
    assert (a.reason is None) == (b.reason is None)
    assert [(c.value, c.tokens) for c in a.candidates] == [(c.value, c.tokens) for c in b.candidates]
    for ca, cb in zip(a.candidates, b.candidates, strict=True):
        assert math.isclose(ca.log_p, cb.log_p, rel_tol=1e-9, abs_tol=1e-12)
    assert [(s.start, s.end, s.value) for s in a.spans] == [(s.start, s.end, s.value) for s in b.spans]
    assert math.isclose(a.confidence, b.confidence, rel_tol=1e-9, abs_tol=1e-12)
    assert len(a.bit_confidence) == len(b.bit_confidence)
    for x, y in zip(a.bit_confidence, b.bit_confidence, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    ("per_value", "cells", "c", "k", "bits", "windows"),
    [
        (False, 6, 4, 6, 2, 8),  # v2 level 1: six 2-bit segments, eight windows
        (True, 1, 256, 6, 8, 8),  # a per-value level (4096 values in the default; 256 here for speed)
        (False, 4, 4, 4, 2, 1),  # spec v1: one window, no region scan
    ],
)
@pytest.mark.parametrize("versions", [1, 3])
def test_batch_decision_equals_the_scalar_rule_text_by_text(per_value, cells, c, k, bits, windows, versions):
    rng = np.random.default_rng(7 + cells + versions)
    scores, counts = _evidence(rng, 300, windows, cells, c, k, per_value)
    batch = attribution.decide_batch(scores, counts, per_value, versions, ALPHA, bits)
    statuses = set()
    for i, got in enumerate(batch):
        want = scalar.decide(scalar.LevelEvidence(scores[i], counts[i], per_value, versions), ALPHA, bits)
        _same(got, want)
        statuses.add(got.status)
    # the generated texts exercise every verdict (one window: no splices, so no `mixed`)
    # (`detected`, a significant segmented level with its value withheld, occurs for segmented tables only)
    want = {"undecodable", "absent", "decoded", "mixed"} - ({"mixed"} if windows == 1 else set())
    assert statuses - {"detected"} == want
    # a text's verdict does not depend on its batch
    one = attribution.decide(attribution.LevelEvidence(scores[5], counts[5], per_value, versions), ALPHA, bits)
    _same(one, scalar.decide(scalar.LevelEvidence(scores[5], counts[5], per_value, versions), ALPHA, bits))


def test_array_tails_equal_the_scalar_tails():
    rng = np.random.default_rng(3)
    n = rng.integers(0, 300, size=4000).astype(float)
    x = rng.uniform(0, 3, size=4000) * n + rng.uniform(-1, 1, size=4000)
    n[:50] = rng.integers(100, 300, size=50)
    x[:50] = n[:50] * 12.0  # deep tail (q < 1e-280): the asymptotic expansion
    got = stats.log_gamma_sf_array(n, x)
    want = np.array([stats.log_gamma_sf(a, b) for a, b in zip(n, x, strict=True)])
    assert np.allclose(got, want, rtol=1e-12, atol=0)
    assert (got[:50] < -645).all()
    for m in (1, 3, 4096):
        assert np.allclose(stats.log_max_pvalue_array(want, m),
                           [stats.log_max_pvalue(v, m) for v in want], rtol=1e-12, atol=0)
    lps = np.log(rng.uniform(size=(500, 6)))
    live = rng.random((500, 6)) < 0.8
    assert np.allclose(stats.log_fisher_array(lps, live),
                       [stats.log_fisher(list(r[m])) for r, m in zip(lps, live, strict=True)], rtol=1e-12, atol=0)


def test_a_texts_result_is_bit_identical_whatever_shares_its_batch():
    """Celery workers, the in-process drain and the /v1/verify micro-batcher batch texts differently: each
    text's released figures (p-values, confidences) must not change in the last bit with its neighbours."""
    from tests.helpers.keys import make_keyset
    from tests.helpers.synthetic import generate
    from verifier.engine.decoder import Decoder
    from verifier.engine.profile import make_profile

    profile = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,), spec_version=2)
    keys = make_keyset(profile, 3)
    decoder = Decoder(profile, {1: [keys.tables[0]], 2: [keys.tables[1]]})
    rng = np.random.default_rng(5)
    pays = [{"level1": int(rng.integers(4096)), "level2": int(rng.integers(4096))} for _ in range(24)]
    marked = generate(profile, keys, pays, 120, seed=9)
    texts = [row[: int(rng.integers(20, 120))].tolist() for row in marked]
    texts += [marked[0, :60].tolist() + marked[1, 60:].tolist()]  # a splice: mixed
    texts += rng.integers(0, profile.vocab_size, size=(4, 80)).tolist()  # unmarked
    together = [r.to_dict() for r in decoder.decode_ids(texts)]
    assert {lv["status"] for r in together for lv in r["levels"]} >= {"decoded", "absent", "mixed"}
    order = rng.permutation(len(texts))
    shuffled = [r.to_dict() for r in decoder.decode_ids([texts[i] for i in order])]
    for pos, i in enumerate(order):
        assert shuffled[pos] == together[i]
    for i in range(0, len(texts), 5):
        assert decoder.decode_ids([texts[i]])[0].to_dict() == together[i]
