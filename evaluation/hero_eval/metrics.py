"""Metrics with 95% confidence intervals: bit accuracy (text-level bootstrap), Wilson intervals, TPR at FPR."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (0, 1) when n = 0."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def bit_correct(decoded: Sequence[int | None], truth: Sequence[int], undecoded_as: str = "wrong") -> list[float]:
    """Per-bit correctness; undecoded bits count as wrong (0) or as coin flips (0.5)."""
    miss = 0.0 if undecoded_as == "wrong" else 0.5
    return [miss if d is None else float(d == t) for d, t in zip(decoded, truth, strict=True)]


def bit_accuracy(per_text: Sequence[Sequence[float]], n_boot: int = 1000, seed: int = 0) -> dict:
    """Mean bit accuracy over all bits, with a 95% bootstrap CI that resamples *texts* (bits of one text
    are correlated, so a per-bit binomial interval would be too narrow)."""
    rows = [list(r) for r in per_text if len(r)]
    if not rows:
        return {"mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "n_texts": 0, "n_bits": 0}
    correct = np.array([sum(r) for r in rows], dtype=float)
    total = np.array([len(r) for r in rows], dtype=float)
    mean = float(correct.sum() / total.sum())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(rows), size=(n_boot, len(rows)))
    boots = correct[idx].sum(1) / total[idx].sum(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"mean": mean, "lo": float(lo), "hi": float(hi), "n_texts": len(rows), "n_bits": int(total.sum())}


def median_ci(values: Sequence[float], n_boot: int = 1000, seed: int = 0) -> dict:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"median": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0}
    rng = np.random.default_rng(seed)
    boots = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"median": float(np.median(v)), "lo": float(lo), "hi": float(hi), "n": int(v.size)}


def threshold_at_fpr(negatives: Sequence[float], fpr: float) -> float:
    """Smallest threshold t such that at most floor(fpr * n) human scores are > t (empirical)."""
    neg = np.sort(np.asarray(negatives, dtype=float))[::-1]
    if neg.size == 0:
        raise ValueError("no human-text scores to set a threshold")
    k = math.floor(fpr * neg.size + 1e-9)
    return float(neg[min(k, neg.size - 1)])


def tpr_at_fpr(positives: Sequence[float], negatives: Sequence[float], fpr: float) -> dict:
    """TPR (Wilson 95% CI) with the threshold from human text; `resolved` is False when the human set
    is too small to resolve this FPR (fewer than 1/fpr texts: the threshold is then the max human score)."""
    thr = threshold_at_fpr(negatives, fpr)
    pos = np.asarray(positives, dtype=float)
    hits = int((pos > thr).sum())
    lo, hi = wilson(hits, int(pos.size))
    return {
        "tpr": hits / pos.size if pos.size else float("nan"),
        "lo": lo,
        "hi": hi,
        "threshold": thr,
        "n_pos": int(pos.size),
        "n_neg": len(negatives),
        "resolved": fpr * len(negatives) >= 1,
    }


def proportion(k: int, n: int) -> dict:
    """k of n with a Wilson 95% interval (the form every attribution rate is reported in)."""
    lo, hi = wilson(k, n)
    return {"k": int(k), "n": int(n), "p": k / n if n else float("nan"), "lo": lo, "hi": hi}


def reliability(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> list[dict]:
    """Reliability diagram rows: per equal-width confidence bin, count, mean confidence, fraction
    correct (Wilson 95%) and the gap |fraction correct - mean confidence|. Empty bins are left out."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    conf = np.clip(np.asarray(confidence, dtype=float), 0.0, 1.0)
    ok = np.asarray(correct, dtype=bool)
    which = np.minimum(np.searchsorted(edges, conf, side="right") - 1, bins - 1)
    rows = []
    for b in range(bins):
        sel = which == b
        n = int(sel.sum())
        if not n:
            continue
        k = int(ok[sel].sum())
        mean_c = float(conf[sel].mean())
        rows.append(
            {
                "lo_edge": float(edges[b]),
                "hi_edge": float(edges[b + 1]),
                "mean_confidence": mean_c,
                "gap": abs(k / n - mean_c),
                **proportion(k, n),
            }
        )
    return rows
