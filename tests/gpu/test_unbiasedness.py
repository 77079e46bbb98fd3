"""Theorem 1 empirically: over random keys and contexts the HeRo sampler draws exactly P.

>= 200k draws per distribution at V = 50k; chi-square on several binnings must not reject at 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats as sps

from gpu import prf
from gpu.sampler import route_and_sample

V = 50_000
DRAWS = 200_000  # per distribution (issue: >= 200k draws over random keys and contexts)
CHUNK = 1_000


def _draw(logits: torch.Tensor, schedule: tuple[int, ...], draws: int, seed: int, stride: int = 0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(logits.shape[-1], dtype=np.int64)
    i64 = (-(2**63), 2**63 - 1)
    for start in range(0, draws, CHUNK):
        b = min(CHUNK, draws - start)
        ctx = torch.randint(0, logits.shape[-1], (b, 4), generator=g)
        seeds = []
        for _ in range(len(schedule) + 1):  # a random 128-bit key per draw and level
            k0 = torch.randint(*i64, (b,), generator=g)
            k1 = torch.randint(*i64, (b,), generator=g)
            seeds.append(prf.prf_seed(k0, k1, ctx))
        tok = route_and_sample(logits.expand(b, -1), seeds, schedule, stride)
        counts += np.bincount(tok.numpy(), minlength=logits.shape[-1])
    return counts


def _chi2_bins(counts: np.ndarray, probs: np.ndarray, bins: np.ndarray) -> float:
    obs = np.bincount(bins, weights=counts)
    exp = np.bincount(bins, weights=probs) * counts.sum()
    keep = exp > 0
    return sps.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue


def _mass_bins(probs: np.ndarray, order: np.ndarray, min_expected: float, n: int) -> np.ndarray:
    """Group tokens (in `order`) into bins of expected count >= min_expected."""
    bins = np.empty(len(probs), dtype=np.int64)
    acc, b = 0.0, 0
    for t in order:
        bins[t] = b
        acc += probs[t] * n
        if acc >= min_expected:
            acc, b = 0.0, b + 1
    return bins


DISTS = {
    "flat": lambda g: torch.zeros(V, dtype=torch.float64),
    "peaked": lambda g: -1.5 * torch.log(torch.randperm(V, generator=g).double() + 1.0),  # Zipf(1.5), shuffled
    "near-greedy": lambda g: torch.where(torch.arange(V) == 31_337, 9.0, 0.0).double()
    + torch.randn(V, generator=g, dtype=torch.float64),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DISTS))
@pytest.mark.parametrize("schedule", [(20,)])
def test_sampler_is_unbiased(name, schedule):
    g = torch.Generator().manual_seed(7)
    logits = DISTS[name](g).float().unsqueeze(0)
    probs = torch.softmax(logits[0], -1).numpy()
    counts = _draw(logits, schedule, DRAWS, seed=11)
    assert counts.sum() == DRAWS
    by_mass = _mass_bins(probs, np.argsort(-probs, kind="stable"), 20.0, DRAWS)
    contiguous = _mass_bins(probs, np.arange(V), 20.0, DRAWS)  # aligned with the chunk structure
    strided = _mass_bins(probs, np.argsort(np.arange(V) % 997, kind="stable"), 20.0, DRAWS)
    pvals = [_chi2_bins(counts, probs, bins) for bins in (by_mass, contiguous, strided)]
    print(f"\n{name}: chi-square p (by mass, contiguous, strided) = {', '.join(f'{p:.3f}' for p in pvals)}")
    assert min(pvals) > 1e-3


@pytest.mark.parametrize("schedule,stride", [((), 0), ((20, 4, 4), 0), ((3, 2), 0), ((20,), 20), ((20, 4), 20)])
def test_other_depths_and_layouts_unbiased(schedule, stride):
    v = 3000
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(v, generator=g) * 2).unsqueeze(0)
    probs = torch.softmax(logits[0], -1).numpy()
    n = 100_000
    counts = _draw(logits, schedule, n, seed=5, stride=stride)
    bins = _mass_bins(probs, np.argsort(-probs, kind="stable"), 20.0, n)
    assert _chi2_bins(counts, probs, bins) > 1e-3


def test_unmarked_rows_draw_plain_distribution():
    """Rows the fused step draws unmarked (spec v2: the first h tokens) in a batch beside marked rows: exactly P,
    keys unused; the marked rows' draw is fixed by key, context and payload."""
    from gpu.sampler import HeroSampler
    from gpu.step import FusedSampler

    v, h = 3000, 4
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(v, generator=g) * 2
    probs = torch.softmax(logits.double(), -1).numpy()
    tables = [[bytes([lv, i]) * 8 for i in range(4)] for lv in range(2)]
    fs = FusedSampler(HeroSampler((20,), 6, tables, b"\x07" * 16), h, 2)
    b, rounds = 1000, 100
    ctx = torch.zeros(b, h, dtype=torch.int64)  # one context for all rows: a watermarked draw would be fixed
    payload = torch.zeros(b, 6, 2, dtype=torch.int64)
    mark = torch.arange(b) % 2 == 0  # half the rows watermarked (a continuation context), half fresh (< h drawn)
    counts = np.zeros(v, dtype=np.int64)
    for _ in range(rounds):
        generated = torch.where(mark, h, 0).to(torch.int64)  # each round a new request: no context seen yet
        tok, marked = fs.step(logits.expand(b, -1), ctx, payload, generated, fs.new_log(b), generator=g,
                              with_marks=True)
        assert torch.equal(marked, mark)
        assert len(set(tok[mark].tolist())) == 1  # same key, context and payload -> the same token
        counts += np.bincount(tok[~mark].numpy(), minlength=v)
    n = int(counts.sum())
    bins = _mass_bins(probs, np.argsort(-probs, kind="stable"), 20.0, n)
    assert _chi2_bins(counts, probs, bins) > 1e-3
