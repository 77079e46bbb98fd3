"""Is the model-free score the moderator's loss on chat answers? Score functions of U against HeRo's -log(1 - U).

A model-free verifier sums a fixed function h of each scored token's uniform U (HeRo: h(U) = -log(1 - U), the
`ars` score, Exp(1) under the null). For Gumbel-max with next-item distribution P the chosen item's U has density
f_P(y) = sum_i y^(1/p_i - 1) (Li, Ruan, Wang, Long, Su 2024), so the best fixed h is log E[f_P(y)] over the
distributions P the verifier meets (the prior-averaged likelihood ratio; tokens independent), and h_opt,D =
log(y^(D/(1-D)) + y^((1-D)/D)) is the paper's minimax rule for max_i p_i <= 1 - D. This replays spec v4's design
measurement (research/v4_levers.py: recorded SmolLM2-135M-Instruct chat distributions, top-k 50 / top-p 0.9,
K_1 = 80 contiguous, the gated opening, 4 draws per answer) and reads each level with each score:

- level 1 (moderator): detection at 50 tokens, p <= 1e-3 over N = 4 issued values;
- level 2 (auditor, model-free): the true `user` at p <= 1e-4 over 4,096 values at 100 / 200 tokens.

Null tails: Gamma for `ars`; for other scores the Lugannani-Rice saddlepoint of n i.i.d. h(U) with the CGF by
quadrature, checked against Monte Carlo at 1e-3. The prior-averaged score is fitted on the first half of the answers
and measured on the second half (every score is measured on the second half).

    python research/v4_levers.py --record /tmp/v4_chat.pt --prompts 40 --tokens 200
    python research/score_functions.py /tmp/v4_chat.pt --json research/results/score-functions.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from scipy import optimize, stats
from v4_levers import H, chunk_of, simulate, wilson  # research/v4_levers.py: this script's folder is on sys.path

GRID = (np.arange(200_000) + 0.5) / 200_000  # quadrature nodes in U for the null CGF


def log_y(ev: np.ndarray) -> np.ndarray:
    """log U from the evidence ev = -log(1 - U), accurate near both ends."""
    return np.log(-np.expm1(-ev))


def h_opt(delta: float) -> Callable[[np.ndarray], np.ndarray]:
    a, b = delta / (1 - delta), (1 - delta) / delta
    return lambda ev: np.logaddexp(a * log_y(ev), b * log_y(ev))


def h_mix(dists: list[np.ndarray], fresh_share: float, knots: int = 400) -> Callable[[np.ndarray], np.ndarray]:
    """log m(y), m the mean of f_P over the training tokens' distributions (a fresh token contributes f = 1),
    tabulated on a grid of log(1 - y) and interpolated."""
    ev_grid = np.concatenate([np.linspace(1e-6, 1.0, knots // 2), np.geomspace(1.0, 60.0, knots // 2)[1:]])
    ly = log_y(ev_grid)
    m = np.zeros_like(ev_grid)
    for p in dists:
        p = p[p > 0]
        m += np.exp(np.clip(np.outer(1 / p - 1, ly), -700, 50)).sum(0)
    m = (1 - fresh_share) * m / len(dists) + fresh_share
    lm = np.log(m)
    return lambda ev: np.interp(ev, ev_grid, lm, left=lm[0], right=lm[-1])


def tail_fn(h: Callable[[np.ndarray], np.ndarray] | None) -> Callable[[int, np.ndarray], np.ndarray]:
    """log P0[sum of n i.i.d. h(U) >= x]."""
    if h is None:  # ars: Gamma(n, 1)
        return lambda n, x: stats.gamma.logsf(x, n)
    v = h(-np.log1p(-GRID))

    def cgf(s: float) -> tuple[float, float, float]:
        z = s * v
        mx = z.max()
        w = np.exp(z - mx)
        w /= w.sum()
        m1 = float((w * v).sum())
        m2 = float((w * v * v).sum()) - m1 * m1
        return float(mx + math.log(np.exp(z - mx).mean())), m1, m2

    def one(n: int, x: float) -> float:
        mean = float(v.mean())
        if x <= n * mean:
            return 0.0
        try:
            s = optimize.brentq(lambda s: n * cgf(s)[1] - x, 1e-9, 200.0)
        except ValueError:
            return -np.inf
        k, _, k2 = cgf(s)
        w = math.sqrt(max(2 * (s * x - n * k), 1e-300))
        u = s * math.sqrt(n * k2)
        # Barndorff-Nielsen r*: P ~ 1 - Phi(w + log(u / w) / w), in log space
        return float(stats.norm.logsf(w + math.log(u / w) / w))

    return lambda n, x: np.array([one(n, float(xi)) for xi in np.atleast_1d(x)])


def threshold(tail, n: int, log_target: float, lo: float, hi: float) -> float:
    """The statistic value whose null tail is exp(log_target) (bisection; tail decreasing in x)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if tail(n, np.array([mid]))[0] > log_target:
            lo = mid
        else:
            hi = mid
    return hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    data = torch.load(args.recording, weights_only=False)
    rows = data["rows"]
    half = len(rows) // 2
    rng = np.random.default_rng(args.seed)
    ev, _whole, fresh, _ = simulate(rows, (80,), 0, args.reps, rng)  # [B, R, T, 2]: level 1, level 2

    # training distributions of each level (first half of the answers): level-1 chunk masses, level-2 in-chunk
    lvl1, lvl2, fresh_tr = [], [], float(fresh[:half].mean())
    for text in rows[:half]:
        for ids, p in text:
            c = chunk_of(49152, 80, ids)
            masses = np.bincount(c, weights=p, minlength=80)
            lvl1.append(masses[masses > 0])
            j = int(np.argmax(p))  # in-chunk law of the most likely chunk (a typical draw's chunk)
            inside = p[c == c[j]]
            lvl2.append(inside / inside.sum())
    scores: dict[str, tuple[Callable | None, Callable | None]] = {"ars (HeRo today)": (None, None)}
    for d in (0.1, 0.2, 0.3, 0.5):
        scores[f"h_opt,{d}"] = (h_opt(d), h_opt(d))
    scores["prior-averaged LR (fitted)"] = (h_mix(lvl1, fresh_tr), h_mix(lvl2, fresh_tr))

    test = ev[half:]
    out: dict = {"texts": int(test.shape[0]), "reps": args.reps, "tokens": int(test.shape[2]),
                 "mean_fresh_of_50": float(fresh[:, :, :50].sum(-1).mean())}
    cells = [("detected_50_level1_N4", 0, 50, math.log(1e-3 / 4)),
             ("user_100_level2_N4096", 1, 100, math.log(1e-4 / 4096)),
             ("user_200_level2_N4096", 1, 200, math.log(1e-4 / 4096))]
    for name, (h1, h2) in scores.items():
        row = {}
        for cell, lv, n_tok, target in cells:
            h = h1 if lv == 0 else h2
            x = test[:, :, H:n_tok, lv]
            stat = x.sum(-1) if h is None else h(x).sum(-1)
            n = n_tok - H
            tail = tail_fn(h)
            lo = float(n * (1.0 if h is None else h(-np.log1p(-GRID)).mean()))
            thr = threshold(tail, n, target, lo, lo + 40 * math.sqrt(n) + 200)
            hit = stat >= thr
            per_text = hit.mean(1)
            row[cell] = {"rate": round(float(hit.mean()), 3),
                         "wilson95_texts": wilson(round(float(per_text.sum())), hit.shape[0])}
        if h1 is not None:  # the saddlepoint against Monte Carlo at the detection cell's 1e-3
            null = h1(rng.exponential(size=(400_000, 47))).sum(-1)
            thr = threshold(tail_fn(h1), 47, math.log(1e-3), 0.0, 200.0)
            row["null_check_mc_rate_at_saddlepoint_1e-3"] = float((null >= thr).mean())
        out[name] = row
        print(name, json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
