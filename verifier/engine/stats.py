"""Null distributions and p-values for the decoder, in log space so strong marks never underflow.

Null: for a key set that did not produce the text, each scored token's evidence -log(1-U) is Exp(1)
and independent (distinct contexts), so a candidate's segment score over n tokens is Gamma(n, 1).
A segment's statistic is the maximum over its 2^b independent candidates; segments and levels are
combined with Fisher's method; trying several key versions costs a Bonferroni factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import special

LOG_TINY = -700.0  # below this, exp() underflows binary64


def log_gamma_sf(n: float, x: float) -> float:
    """log P[Gamma(n,1) > x], accurate far into the tail."""
    if n <= 0:
        return 0.0
    if x <= 0:
        return 0.0
    q = float(special.gammaincc(n, x))
    if q > 1e-280:
        return math.log(q)
    # Asymptotic expansion: Q(n,x) ~ x^(n-1) e^-x / Gamma(n) * sum_k (n-1)_k^falling / x^k
    term, total = 1.0, 1.0
    for k in range(1, 60):
        term *= (n - k) / x
        total += term
        if abs(term) < 1e-17 * abs(total):
            break
    return (n - 1) * math.log(x) - x - math.lgamma(n) + math.log(max(total, 1e-300))


def log_max_pvalue(log_sf_one: float, candidates: int) -> float:
    """log P[max of `candidates` iid nulls exceeds the observed]: 1 - (1 - q)^M, stably."""
    if candidates == 1:
        return log_sf_one
    q = math.exp(log_sf_one) if log_sf_one > LOG_TINY else 0.0
    if q == 0.0 or q < 1e-12:
        return math.log(candidates) + log_sf_one  # 1-(1-q)^M = Mq (1 - O(Mq))
    return math.log(-math.expm1(candidates * math.log1p(-q)))


def log_fisher(log_ps: Sequence[float]) -> float:
    """Fisher's method: X = -2 sum log p ~ chi^2_{2m}; returns log P[chi^2_{2m} > X]."""
    if not log_ps:
        return 0.0
    x = -2.0 * sum(log_ps)
    return log_gamma_sf(len(log_ps), x / 2.0)


def log_bonferroni(log_p: float, tries: int) -> float:
    return min(0.0, log_p + math.log(max(tries, 1)))


def to_p(log_p: float) -> float:
    return math.exp(log_p) if log_p > LOG_TINY else 0.0
