"""Null distributions and p-values for the decoder, in log space so strong marks never underflow.

Null: for a key set that did not produce the text, each scored token's evidence -log(1-U) is Exp(1)
and independent (distinct contexts), so a candidate's segment score over n tokens is Gamma(n, 1).
A segment's statistic is the maximum over its 2^b independent candidates; segments and levels are
combined with Fisher's method; trying several key versions costs a Bonferroni factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
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
    if q >= 1.0:  # no evidence at all (log1p(-1) is undefined)
        return 0.0
    if q == 0.0 or q < 1e-12:
        return math.log(candidates) + log_sf_one  # 1-(1-q)^M = Mq (1 - O(Mq))
    return math.log(-math.expm1(candidates * math.log1p(-q)))


def log_fisher(log_ps: Sequence[float]) -> float:
    """Fisher's method: X = -2 sum log p ~ chi^2_{2m}; returns log P[chi^2_{2m} > X]."""
    if not log_ps:
        return 0.0
    x = -2.0 * sum(log_ps)
    return log_gamma_sf(len(log_ps), x / 2.0)


def log_text_p(level_log_ps: Sequence[float]) -> float:
    """A text's log p-value from its levels' (level 1 first): the exact null tail of min(p_1, Fisher(all)).

    Fisher alone lets an auditor's weak deeper level dilute level 1 (a moderator holding level 1 only got
    p = 3e-5 where an auditor got 2.3e-4 on one text). The statistic min(p_1, F) keeps level 1's evidence:
    with two levels, P0[min(p_1, F) <= x] = x + c ln(1/x) exactly, where c(1 - ln c) = x is Fisher's threshold
    on p_1 p_2 (and P0[p_1 p_2 <= c, p_1 > x] = c ln(1/x)), at most 2x. More levels: Bonferroni, 2x.
    One level: p_1. The decoder also calls a text watermarked when p_1 <= alpha (spec 15.4)."""
    if len(level_log_ps) <= 1:
        return level_log_ps[0] if level_log_ps else 0.0
    x = min(level_log_ps[0], log_fisher(level_log_ps))
    if len(level_log_ps) > 2 or x > -1e-12:
        return min(0.0, x + math.log(2.0))
    # c: solve log c + log(1 - log c) = x (Newton on y = log c; y <= x)
    y = x
    for _ in range(60):
        f = y + math.log1p(-y) - x
        y_new = y - f / (1.0 - 1.0 / (1.0 - y))
        if abs(y_new - y) < 1e-13 * max(1.0, abs(y)):
            y = y_new
            break
        y = y_new
    # log(x_p + c ln(1/x_p)) = x + log(1 + exp(y - x) * (-x))
    return min(0.0, x + math.log1p(math.exp(y - x) * (-x)))


def log_bonferroni(log_p: float, tries: int) -> float:
    return min(0.0, log_p + math.log(max(tries, 1)))


def to_p(log_p: float) -> float:
    return math.exp(log_p) if log_p > LOG_TINY else 0.0


# -- the same functions over arrays (a batch of texts, regions and cells at once) ----------------------------
# Element for element they compute what the scalar functions above compute (tests/engine/test_stats.py checks it):
# the batch decision (engine/attribution.py) must not depend on how many texts share a call.


def log_gamma_sf_array(n: ArrayLike, x: ArrayLike) -> np.ndarray:
    """`log_gamma_sf` elementwise (n, x broadcast together)."""
    n, x = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(x, dtype=np.float64))
    out = np.zeros(n.shape)
    live = (n > 0) & (x > 0)
    if not live.any():
        return out
    nl, xl = n[live], x[live]
    q = special.gammaincc(nl, xl)
    res = np.empty_like(q)
    ok = q > 1e-280
    res[ok] = np.log(q[ok])
    deep = ~ok
    if deep.any():  # the asymptotic expansion, term by term as in the scalar loop
        nd, xd = nl[deep], xl[deep]
        term, total = np.ones_like(nd), np.ones_like(nd)
        active = np.ones(nd.shape, dtype=bool)
        for k in range(1, 60):
            term = np.where(active, term * ((nd - k) / xd), term)
            total = np.where(active, total + term, total)
            active &= ~(np.abs(term) < 1e-17 * np.abs(total))
            if not active.any():
                break
        res[deep] = (nd - 1) * np.log(xd) - xd - special.gammaln(nd) + np.log(np.maximum(total, 1e-300))
    out[live] = res
    return out


def log_max_pvalue_array(log_sf_one: ArrayLike, candidates: int) -> np.ndarray:
    """`log_max_pvalue` elementwise, for one number of candidates."""
    lsf = np.asarray(log_sf_one, dtype=np.float64)
    if candidates == 1:
        return lsf.copy()
    q = np.where(lsf > LOG_TINY, np.exp(np.maximum(lsf, LOG_TINY)), 0.0)
    small = q < 1e-12
    with np.errstate(divide="ignore"):
        big = np.log(-np.expm1(candidates * np.log1p(-np.where(small, 0.0, q))))
    return np.where(small, math.log(candidates) + lsf, big)


def log_fisher_array(log_ps: ArrayLike, live: ArrayLike) -> np.ndarray:
    """`log_fisher` per row over the entries where `live` ([N, m] each): log P of the combined statistic."""
    lp = np.where(live, np.asarray(log_ps, dtype=np.float64), 0.0)
    m = np.asarray(live).sum(axis=-1)
    return log_gamma_sf_array(m, -lp.sum(axis=-1))
