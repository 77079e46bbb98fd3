"""Level-2 linkage and framing attacks by accounts that pool their own texts (no level-2 keys).

Linkage: two texts are "linked" by how often they pick the same next token after an h-token context
that both contain (first occurrences only, as the decoder scores them). Under a keyed sampler the
noise after a context is a function of (key, context, value), so texts of one user agree more often
than texts of two users; plain sampling agrees only as often as the model repeats itself. A colluding
group labels pairs of its own texts (same account / different accounts), fits a threshold on the
agreement score, and applies it to pairs of outsiders' texts. The level-1 variant counts agreement only
where both texts chose the same level-1 chunk (which a level-1 key holder can compute).

Framing: the group splices two members' texts and submits them; any value named that no member
carries frames an outsider.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations

import numpy as np


def context_next(ids: Sequence[int], h: int) -> dict[tuple[int, ...], int]:
    """First occurrence of each h-token context -> the token that followed it."""
    out: dict[tuple[int, ...], int] = {}
    for j in range(h, len(ids)):
        ctx = tuple(ids[j - h : j])
        if ctx not in out:
            out[ctx] = ids[j]
    return out


def agreement(a: dict, b: dict, same_chunk: Callable[[int, int], bool] | None = None) -> tuple[int, int]:
    """(agreeing, shared) contexts of two texts; with `same_chunk`, only contexts where both next tokens
    fall in the same level-1 chunk count as shared."""
    agree = shared = 0
    for ctx, t in a.items():
        u = b.get(ctx)
        if u is None or (same_chunk is not None and not same_chunk(t, u)):
            continue
        shared += 1
        agree += t == u
    return agree, shared


def score(agree: int, shared: int) -> float:
    """Smoothed agreement rate (one pseudo-agreement and one pseudo-disagreement)."""
    return (agree + 1) / (shared + 2)


def pair_scores(
    texts: Sequence[Sequence[int]], accounts: Sequence[int], members: set[int], h: int, same_chunk=None
) -> tuple[list[float], list[int], list[int], list[tuple[int, int]]]:
    """For all pairs of texts whose accounts are both in `members`: scores, labels (1 = same account),
    shared contexts, and the pair's two accounts."""
    maps = [context_next(t, h) for t in texts]
    xs, ys, shared, groups = [], [], [], []
    idx = [i for i, a in enumerate(accounts) if a in members]
    for i, j in combinations(idx, 2):
        agree, n = agreement(maps[i], maps[j], same_chunk)
        xs.append(score(agree, n))
        ys.append(int(accounts[i] == accounts[j]))
        shared.append(n)
        groups.append((accounts[i], accounts[j]))
    return xs, ys, shared, groups


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve (ties count one half); 0.5 = no better than chance."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=int)
    pos, neg = s[y == 1], s[y == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def fit_threshold(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Threshold maximising balanced accuracy on the training pairs (predict 'same' above it)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=int)
    best, best_t = -1.0, float("inf")
    for t in np.unique(s):
        pred = s > t
        bal = 0.5 * (pred[y == 1].mean() + (~pred[y == 0]).mean())
        if bal > best:
            best, best_t = bal, float(t)
    return best_t


def balanced_accuracy(scores: Sequence[float], labels: Sequence[int], threshold: float) -> tuple[float, float, float]:
    """(balanced accuracy, true-positive rate, true-negative rate) at `threshold`."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=int)
    pred = s > threshold
    tpr = float(pred[y == 1].mean()) if (y == 1).any() else float("nan")
    tnr = float((~pred[y == 0]).mean()) if (y == 0).any() else float("nan")
    return 0.5 * (tpr + tnr), tpr, tnr


def bootstrap_auc(scores, labels, groups, n_boot: int = 300, seed: int = 0) -> tuple[float, float]:
    """95% interval of the AUC resampling *accounts* (pairs of one account are not independent)."""
    rng = np.random.default_rng(seed)
    s, y = np.asarray(scores), np.asarray(labels)
    g = np.asarray(groups)  # [n_pairs, 2] accounts of each pair
    accts = np.unique(g)
    vals = []
    for _ in range(n_boot):
        pick = rng.choice(accts, size=len(accts), replace=True)
        w = np.bincount(np.searchsorted(accts, pick), minlength=len(accts))
        weight = w[np.searchsorted(accts, g[:, 0])] * w[np.searchsorted(accts, g[:, 1])]
        keep = np.repeat(np.arange(len(s)), weight)
        if keep.size:
            vals.append(auc(s[keep], y[keep]))
    vals = [v for v in vals if np.isfinite(v)]
    if not vals:
        return float("nan"), float("nan")
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)
