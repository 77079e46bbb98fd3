"""Does a sampler draw exactly the model's distribution? (Theorem 1 tests of every spec's step.)"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps


def mass_bins_chi2_pvalue(counts: np.ndarray, probs: np.ndarray, expected_per_bin: float = 10.0) -> float:
    """Chi-square p-value of token `counts` against `probs`, tokens pooled (most probable first) into bins that
    expect about `expected_per_bin` draws each, so rare tokens never leave a cell too small for the test."""
    n = counts.sum()
    bins = np.empty(len(probs), dtype=np.int64)
    acc, b = 0.0, 0
    for t in np.argsort(-probs):
        bins[t] = b
        acc += probs[t] * n
        if acc >= expected_per_bin:
            acc, b = 0.0, b + 1
    obs, exp = np.bincount(bins, weights=counts), np.bincount(bins, weights=probs) * n
    return float(sps.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)
