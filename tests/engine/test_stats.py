"""p-values: correct under the null, finite far into the tail."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from verifier.engine import stats


def test_log_gamma_sf_matches_scipy_and_extends_tail():
    for n, x in [(1, 0.5), (10, 12.0), (50, 80.0), (200, 260.0)]:
        assert math.isclose(stats.log_gamma_sf(n, x), sps.gamma.logsf(x, n), rel_tol=1e-9)
    deep = stats.log_gamma_sf(200, 2000.0)
    assert math.isfinite(deep) and deep < -1000
    # mpmath (50 digits): log Q(200, 2000) = -1345.2493365367956...; scipy underflows to -inf here.
    assert math.isclose(deep, -1345.2493365367956, rel_tol=1e-12)
    assert math.isclose(stats.log_gamma_sf(10, 400.0), _mp_log_q(10, 400), rel_tol=1e-10)
    assert stats.log_gamma_sf(5, 0.0) == 0.0


def _mp_log_q(n, x):
    import mpmath

    mpmath.mp.dps = 40
    return float(mpmath.log(mpmath.gammainc(n, x, mpmath.inf, regularized=True)))


def test_max_of_candidates_pvalue_is_uniform_under_null():
    rng = np.random.default_rng(0)
    n, m = 30, 4
    s = rng.gamma(n, size=(20000, m)).max(axis=1)
    p = np.array([math.exp(stats.log_max_pvalue(stats.log_gamma_sf(n, x), m)) for x in s])
    assert sps.kstest(p, "uniform").pvalue > 1e-3


def test_fisher_and_bonferroni():
    rng = np.random.default_rng(1)
    ps = rng.uniform(size=(5000, 6))
    comb = np.array([math.exp(stats.log_fisher([math.log(x) for x in row])) for row in ps])
    assert sps.kstest(comb, "uniform").pvalue > 1e-3
    assert stats.log_bonferroni(math.log(0.3), 4) == 0.0
    assert math.isclose(stats.log_bonferroni(math.log(1e-9), 4), math.log(4e-9))
    assert stats.to_p(-1e6) == 0.0
