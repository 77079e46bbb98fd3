"""Reductions on the scores' device (gpu/regions.py, attribution.posterior_on_device): the region sums and
their best two values are bit for bit the host's fixed-order sums; the device posterior agrees with the host's
to 1e-12; on CUDA (skipped without one) the decoder releases exactly what it releases on the CPU."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from gpu.regions import bounds, region_tops
from tests.helpers.keys import make_keyset
from tests.helpers.synthetic import generate
from verifier.engine import attribution
from verifier.engine.attribution import _bit_confidence, posterior_batch, posterior_on_device
from verifier.engine.decoder import Decoder
from verifier.engine.profile import make_profile

has_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _reference_sum(scores: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The host path's order: the whole text and prefixes from window 0 forward, suffixes from the last back."""
    w = scores.shape[1]
    order = range(lo, hi) if lo == 0 else range(w - 1, lo - 1, -1)
    acc = None
    for j in order:
        acc = scores[:, j].copy() if acc is None else acc + scores[:, j]
    return acc


def _case(seed: int, b: int, w: int, cells: int, c: int, k: int):
    g = torch.Generator().manual_seed(seed)
    scores = torch.empty(b, w, cells, c, dtype=torch.float64).exponential_(generator=g)
    counts = torch.randint(0, 5, (b, w, k), generator=g)
    return scores, counts


@pytest.mark.parametrize("per_value,cells,c,k,w", [(True, 1, 4096, 4, 8), (False, 4, 4, 4, 8), (True, 1, 256, 4, 1)])
def test_region_tops_are_the_fixed_order_sums_and_their_best_two(per_value, cells, c, k, w):
    scores, counts = _case(3, 6, w, cells, c, k)
    tops = region_tops(scores, counts, per_value)
    regions = bounds(w)
    scan = tops.scan(range(6)) if w > 1 else None
    assert tops.values.shape == (6, cells, 2) and tops.tokens.shape == (6, cells)
    s = scores.numpy()
    cell_counts = counts.numpy().sum(-1, keepdims=True) if per_value else counts.numpy()
    for r, (lo, hi) in enumerate(regions):
        values, index, tokens = (tops.values, tops.index, tops.tokens) if r == 0 else (x[:, r - 1] for x in scan)
        ref = _reference_sum(s, lo, hi)  # [B, cells, C]
        order = np.argsort(-ref, axis=-1, kind="stable")[..., :2]
        np.testing.assert_array_equal(index, order)
        assert np.array_equal(values, np.take_along_axis(ref, order, -1))  # bit for bit
        np.testing.assert_array_equal(tokens, cell_counts[:, lo:hi].sum(1))
        assert np.array_equal(tops.region_scores([(i, r) for i in range(6)]), ref)


def test_a_subset_is_reduced_as_it_is_alone():
    scores, counts = _case(4, 7, 8, 1, 512, 4)
    tops = region_tops(scores, counts, True)
    rows = [5, 0, 3]
    sub, alone = tops.take(rows), region_tops(scores[rows], counts[rows], True)
    assert np.array_equal(sub.values, alone.values) and np.array_equal(sub.index, alone.index)
    assert all(np.array_equal(a, b) for a, b in zip(sub.scan([2, 0]), alone.scan([2, 0]), strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(tops.scan([3]), alone.scan([2]), strict=True))
    assert np.array_equal(sub.region_scores([(0, 2), (2, 9)]), alone.region_scores([(0, 2), (2, 9)]))


@pytest.mark.parametrize("cells,c,bits", [(1, 4096, 12), (4, 4, 2)])
def test_device_posterior_agrees_with_the_host(cells, c, bits):
    rng = np.random.default_rng(5)
    d = 9
    n = rng.integers(20, 200, size=(d, cells))
    n[0, 0] = 0  # a cell without tokens
    scores = rng.gamma(n[..., None].clip(1), 1.0, size=(d, cells, c))
    winners = rng.integers(0, c, size=(d, cells))
    for i in range(1, d):  # the winner carries the mark in most texts: confidences far from 0
        scores[i, np.arange(cells), winners[i]] += 1.8 * n[i] * (i % 3)
    conf_h, marg = posterior_batch(scores, n, winners)
    bits_h = _bit_confidence(marg, n, winners, bits)
    conf_d, bits_d = posterior_on_device(torch.from_numpy(scores), n, winners, bits)
    np.testing.assert_allclose(conf_d, conf_h, rtol=1e-12, atol=1e-14)
    assert max(conf_h) > 0.99 and min(conf_h[1:]) < 0.5  # both regimes exercised
    for a, b in zip(bits_d, bits_h, strict=True):
        assert [x is None for x in a] == [x is None for x in b]
        np.testing.assert_allclose([x for x in a if x is not None], [x for x in b if x is not None], rtol=1e-12)


def _texts(prof, keys):
    rng = random.Random(2)
    pays = [{"level1": rng.randrange(4096), "level2": rng.randrange(4096)} for _ in range(24)]
    marked = generate(prof, keys, pays, 200, seed=3).tolist()
    splices = [a[:100] + b[:100] for a, b in zip(marked[16:20], marked[20:24], strict=True)]
    unmarked = [[random.Random(i).randrange(prof.vocab_size) for _ in range(200)] for i in range(8)]
    return marked[:8] + [m[:40] for m in marked[8:16]] + splices + unmarked


def _same_release(a_results, b_results):
    released = 0
    for a, b in zip(a_results, b_results, strict=True):
        assert a.watermarked == b.watermarked
        for la, lb in zip(a.levels, b.levels, strict=True):
            assert (la.status, la.fields, la.key_version) == (lb.status, lb.fields, lb.key_version)
            assert la.log10_p_value == pytest.approx(lb.log10_p_value, rel=1e-9, abs=1e-12)
            assert la.confidence == pytest.approx(lb.confidence, rel=1e-9, abs=1e-12)
            released += la.status == "decoded"
    return released


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def problem(request):
    prof = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,), spec_version=request.param)
    keys = make_keyset(prof, 1)
    return prof, {1: [keys.tables[0]], 2: [keys.tables[1]]}, _texts(prof, keys)


def test_the_device_posterior_path_releases_what_the_host_path_releases(problem, monkeypatch):
    """The CUDA branch of `confidences`, run on CPU tensors: same statuses, values and p-values."""
    prof, tables, texts = problem
    host = Decoder(prof, tables).decode_ids(texts)

    def on_device(tops, rows, n, winners, bits):
        conf, bit_conf = posterior_on_device(tops.region_sums(rows), n, winners, bits)
        return conf.tolist(), bit_conf

    monkeypatch.setattr(attribution, "confidences", on_device)
    assert _same_release(host, Decoder(prof, tables).decode_ids(texts)) >= 12


@has_cuda
def test_cuda_decoder_releases_what_the_cpu_decoder_releases(problem):
    prof, tables, texts = problem
    assert _same_release(Decoder(prof, tables).decode_ids(texts),
                         Decoder(prof, tables, device="cuda").decode_ids(texts)) >= 12
