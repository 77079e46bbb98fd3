"""Which value(s) of one level the evidence supports: status, value, candidates, spans, confidence.

Input: a level's evidence summed per window of scored tokens (W windows; W = 1 under spec v1) and per
cell (position segment, or the single cell of a per-value level). Decisions (docs/spec.md section 13):

- The level p-value (whole text; Bonferroni over key versions) must be <= alpha, else `absent`.
- Per-value level (v2 private): the maximum-likelihood value over all 2^b values is released when no
  other value is significant on its own: the runner-up on the whole text, or the best value of any
  prefix or suffix at a window boundary (2(W-1) regions), each tested with the max-of-2^b Gamma tail at
  alpha / (2(W-1) + 1). A value no source carried has pure Exp(1) evidence everywhere, so it passes any
  of these tests with probability <= alpha in total: a splice of two users yields `mixed` with both,
  or one of them, never a third (up to alpha).
- Segmented level (v1, v2 level 1): each segment's winner must be significant on its own at alpha / K
  (Bonferroni over segments), so a wrong segment value is released with probability <= alpha; a
  segment whose runner-up is also significant means two sources (`mixed`), and a value is released
  only when no segment's runner-up is even weakly significant (p <= 1e-3), since segment winners of a
  spliced text may come from different sources; prefixes and suffixes are decoded the same way
  (thresholds also divided by the number of regions) to name the sources. Residual risk: a splice
  whose minority source stays below both tests in one segment while winning another (spec 13.4).
- The decisions themselves are in engine/verdicts.py (`gate`, `opened_level`, `decide_value`); this module
  computes their evidence.
- Confidence = posterior probability that the released value is exactly right: uniform prior over the
  values, every other value's score exactly Gamma(n, 1), the true value's approximately Normal(n m, v n)
  with its mean evidence per token m integrated over a grid (not plugged in); segments share m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import special
from torch import Tensor

from gpu.regions import RegionTops, bounds, region_tops
from verifier.engine import stats
from verifier.engine.verdicts import Attribution, absent, decide_value, gate, join_cells, opened_level

# Confidence model: a value no source carried scores Gamma(n, 1) (exact, the null); the true value's score
# is approximately Normal(n m, v n), m its mean evidence per token (uniform prior on MEAN_GRID) and v the
# per-token variance of the chosen token's evidence -log(1 - U), which lies between 1 (a certain token)
# and pi^2/6 (a uniform choice among many), so v = 1.3.
MEAN_GRID = torch.linspace(1.0, 10.0, 91, dtype=torch.float64)
TRUE_VARIANCE = 1.3


@dataclass(frozen=True)
class LevelEvidence:
    """One level at one key version: scores [W, cells, C] float64 and counts [W, K] int64 (CPU)."""

    scores: Tensor
    counts: Tensor
    per_value: bool
    versions: int = 1


@dataclass(frozen=True)
class _Regions:
    """Statistics of N regions at once (arrays [N, cells]; one row per region)."""

    n: np.ndarray  # scored tokens per cell
    winners: np.ndarray
    runners: np.ndarray  # the runner-up value per cell (the winner's when C = 1)
    log_p1: np.ndarray  # per cell: max-of-C tail of the winner (0.0 for a cell without tokens)
    log_p2: np.ndarray  # per cell: max-of-(C-1) tail of the runner-up
    level_log_p: np.ndarray  # [N]: Fisher over the cells with tokens


def _regions(vals: np.ndarray, idx: np.ndarray, nn: np.ndarray, c: int) -> _Regions:
    """The tails of N regions from their best two values `vals`/`idx` [N, cells, k] (gpu/regions.py), scored
    tokens `nn` [N, cells] and C values per cell."""
    live = nn > 0
    lp1 = np.where(live, stats.log_max_pvalue_array(stats.log_gamma_sf_array(nn, vals[..., 0]), c), 0.0)
    if c > 1:
        lp2 = np.where(live, stats.log_max_pvalue_array(stats.log_gamma_sf_array(nn, vals[..., 1]), c - 1), 0.0)
    else:
        lp2 = np.zeros(nn.shape)
    return _Regions(nn, idx[..., 0], idx[..., -1], lp1, lp2, stats.log_fisher_array(lp1, live))


def _whole(tops: RegionTops) -> _Regions:
    """`_regions` of every text's whole-text region."""
    return _regions(tops.values, tops.index, tops.tokens, int(tops.scores.shape[-1]))


def _scanned(tops: RegionTops, rows: list[int]) -> _Regions:
    """`_regions` of the prefix/suffix regions of texts `rows` (gpu/regions.RegionTops.scan), text-major."""
    v, i, n = tops.scan(rows)
    c = int(tops.scores.shape[-1])
    return _regions(v.reshape(-1, *v.shape[2:]), i.reshape(-1, *i.shape[2:]), n.reshape(-1, n.shape[-1]), c)


@dataclass(frozen=True)
class _Region:
    """One row of `_Regions` as plain Python values: the per-text decision reads these."""

    lo: int  # windows [lo, hi)
    hi: int
    scores: np.ndarray | None  # [cells, C] where the caller has them (weighted decoding), else fetched on demand
    n: list[int]
    winners: list[int]
    log_p1: list[float]
    log_p2: list[float]
    level_lp: float
    runner: int  # runner-up of cell 0 (per-value levels have one cell)
    row: int = 0  # its row in gpu/regions.bounds (0: the whole text)

    @property
    def tokens(self) -> int:
        return sum(self.n)

    @classmethod
    def of(cls, r: _Regions, i: int, lo: int, hi: int, row: int) -> _Region:
        return cls(lo, hi, None, r.n[i].tolist(), r.winners[i].tolist(), r.log_p1[i].tolist(),
                   r.log_p2[i].tolist(), float(r.level_log_p[i]), int(r.runners[i, 0]), row)


def _log_lr(scores: np.ndarray, n: np.ndarray) -> np.ndarray:
    """log [N(S; n m, v n) / Gamma(n, 1) density at S] for every mean m of MEAN_GRID: [G, *scores.shape].
    `n` has the shape of `scores` without its last (value) axis, and no zeros."""
    nk = n.astype(np.float64)[None, ..., None]
    s = scores[None]
    m = _GRID.reshape(-1, *([1] * scores.ndim))
    log_normal = -0.5 * (s - nk * m) ** 2 / (TRUE_VARIANCE * nk) - 0.5 * np.log(2 * math.pi * TRUE_VARIANCE * nk)
    log_gamma = (nk - 1) * np.log(np.maximum(s, 1e-300)) - s - special.gammaln(nk)
    return log_normal - log_gamma


_GRID = MEAN_GRID.numpy()
# Texts per posterior call: bounds the [G, texts, cells, C] arrays to ~2^21 entries (16 MB each).
POSTERIOR_ENTRIES = 1 << 21


def posterior_batch(scores: np.ndarray, n: np.ndarray, winners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per text, (P[value == winners], per-cell marginals [cells, C]) for scores [D, cells, C], scored tokens
    n [D, cells] and winners [D, cells]; cells without tokens are left out (uniform marginals).

    numpy, single-threaded, every reduction along a fixed axis: a text's figures are bit for bit the same
    whatever else is in the batch (torch may split a reduction across threads by shape)."""
    d, cells, c = scores.shape
    step = max(1, POSTERIOR_ENTRIES // (_GRID.size * cells * c))
    if d > step:
        parts = [posterior_batch(scores[i : i + step], n[i : i + step], winners[i : i + step])
                 for i in range(0, d, step)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    live = n > 0
    logits = _log_lr(scores, np.where(live, n, 1))  # [G, D, cells, C]
    top = logits.max(axis=3, keepdims=True)
    log_z = top[..., 0] + np.log(np.exp(logits - top).sum(axis=3))  # [G, D, cells]
    # posterior over the mean (uniform prior on the grid), from the live cells only
    a = ((log_z - math.log(c)) * live).sum(axis=2)  # [G, D]
    w = np.exp(a - a.max(axis=0))
    w /= _sum0(w)
    log_post = logits - log_z[..., None]
    picked = np.take_along_axis(log_post, np.broadcast_to(winners[None, :, :, None], (_GRID.size, d, cells, 1)),
                                axis=3)[..., 0]  # [G, D, cells]
    joint = (picked * live).sum(axis=2)  # [G, D]
    conf = np.where(live.any(axis=1), np.minimum(_sum0(w * np.exp(joint)), 1.0), 0.0)
    marg = _sum0(w[:, :, None, None] * np.exp(log_post))
    return conf, np.where(live[..., None], marg, 1.0 / c)


def _sum0(x: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in index order. numpy sums a 1-D run pairwise but a batch of runs term by term, so a
    plain .sum(axis=0) of a one-text batch can differ in the last bit from the same text among others."""
    acc = x[0].copy()
    for row in x[1:]:
        acc += row
    return acc


def posterior(scores: Tensor, n: Tensor, winners: list[int]) -> tuple[float, Tensor]:
    """One text's (P[value == winners], per-cell marginals [cells, C]); see the module docstring."""
    conf, marg = posterior_batch(scores.numpy()[None], n.numpy().reshape(1, -1), np.array([winners]))
    return float(conf[0]), torch.from_numpy(marg[0])


def _bit_confidence(marg: np.ndarray, n: np.ndarray, winners: np.ndarray, bits: int) -> list[list[float | None]]:
    """Per text and cell, most significant bit first: the posterior mass of the values that share that bit
    with the winner (None for a cell without tokens). marg [D, cells, C], n and winners [D, cells]."""
    shifts = np.arange(bits - 1, -1, -1)
    cand_bits = (np.arange(marg.shape[2])[:, None] >> shifts) & 1  # [C, bits]
    win_bits = (winners[..., None] >> shifts) & 1  # [D, cells, bits]
    agree = cand_bits.T[None, None] == win_bits[..., None]  # [D, cells, bits, C]
    # summed along the last (contiguous) axis, row by row: a text's figures do not depend on its batch
    return _bit_lists(np.ascontiguousarray(marg[:, :, None, :] * agree).sum(axis=3), n, bits)


def _bit_lists(mass: np.ndarray, n: np.ndarray, bits: int) -> list[list[float | None]]:
    """mass [D, cells, bits] as per-text lists, None for the bits of a cell without tokens."""
    m, live = mass.tolist(), (n > 0).tolist()
    return [[x for k, ok in enumerate(row) for x in (m[i][k] if ok else [None] * bits)] for i, row in enumerate(live)]


# Entries of one [G, texts, cells, C] array in the device posterior (8 bytes each: 512 MB).
DEVICE_POSTERIOR_ENTRIES = 1 << 26


def posterior_on_device(scores: Tensor, n: np.ndarray, winners: np.ndarray,
                        bits: int) -> tuple[np.ndarray, list[list[float | None]]]:
    """`posterior_batch` and `_bit_confidence` on the scores' device (CUDA): scores [D, cells, C] float64 stay
    there, only the confidences [D] and bit masses [D, cells, bits] cross. Same formulas in float64; the
    figures agree with the host's to about 1e-12 (tests/gpu/test_device_reduction.py), the released values and
    statuses do not depend on them. The host's are bit-stable per text; these may move in the last bits with
    the batch's shape (the device's reductions are shape-dependent)."""
    dev = scores.device
    d, cells, c = scores.shape
    grid = MEAN_GRID.to(dev).view(-1, 1, 1, 1)
    step = max(1, DEVICE_POSTERIOR_ENTRIES // (grid.numel() * cells * c))
    live_all = torch.from_numpy(n > 0).to(dev)
    n_all = torch.from_numpy(np.where(n > 0, n, 1)).to(dev, torch.float64)
    win_all = torch.from_numpy(np.asarray(winners, dtype=np.int64)).to(dev)
    shifts = torch.arange(bits - 1, -1, -1, device=dev)
    cand_bits = ((torch.arange(c, device=dev)[:, None] >> shifts) & 1).T  # [bits, C]
    confs, masses = [], []
    for lo in range(0, d, step):
        s, live, win = scores[lo : lo + step][None], live_all[lo : lo + step], win_all[lo : lo + step]
        nk = n_all[lo : lo + step][None, ..., None]
        var = TRUE_VARIANCE * nk
        log_normal = -0.5 * (s - nk * grid) ** 2 / var - 0.5 * torch.log(2 * math.pi * var)
        logits = log_normal - ((nk - 1) * torch.log(s.clamp_min(1e-300)) - s - torch.lgamma(nk))  # [G, D, cells, C]
        log_z = torch.logsumexp(logits, dim=3)
        w = torch.softmax(((log_z - math.log(c)) * live).sum(2), dim=0)  # [G, D]: posterior over the mean
        log_post = logits - log_z[..., None]
        picked = log_post.gather(3, win[None, :, :, None].expand(grid.shape[0], -1, -1, 1))[..., 0]
        conf = (w * torch.exp((picked * live).sum(2))).sum(0).clamp_max(1.0)
        confs.append(torch.where(live.any(1), conf, torch.zeros_like(conf)))
        marg = torch.where(live[..., None], (w[:, :, None, None] * torch.exp(log_post)).sum(0), 1.0 / c)
        agree = cand_bits[None, None] == ((win[..., None] >> shifts) & 1)[..., None]  # [D, cells, bits, C]
        masses.append((marg[:, :, None, :] * agree).sum(3))
    return torch.cat(confs).cpu().numpy(), _bit_lists(torch.cat(masses).cpu().numpy(), n, bits)


def confidences(tops: RegionTops, rows: list[tuple[int, int]], n: np.ndarray, winners: np.ndarray,
                bits: int) -> tuple[list[float], list[list[float | None]]]:
    """Confidence and bit confidences of the values released from region `r` of text `b`, (b, r) in rows:
    on the host from the fetched rows (CPU: bit-stable per text), on the device where the scores live."""
    if tops.scores.device.type == "cpu":
        conf, marg = posterior_batch(tops.region_scores(rows), n, winners)
        return conf.tolist(), _bit_confidence(marg, n, winners, bits)
    conf, bit_conf = posterior_on_device(tops.region_sums(rows), n, winners, bits)
    return conf.tolist(), bit_conf


def decide(ev: LevelEvidence, alpha: float, cell_bits: int) -> Attribution:
    """The level's status and released value; `cell_bits` = bits per cell (b, or the whole value's)."""
    return decide_batch(ev.scores.unsqueeze(0), ev.counts.unsqueeze(0), ev.per_value, ev.versions, alpha,
                        cell_bits)[0]


def whole_text_log_p(tops: RegionTops) -> np.ndarray:
    """Per text [B], the level's whole-text log p-value at one key version (no correction for versions):
    Fisher over the cells with tokens of each cell's max-of-C tail. Picks the version that made a text."""
    return _whole(tops).level_log_p


# Texts whose prefix/suffix regions' tails are computed together (bounds the host's per-call arrays).
REGION_CHUNK = 32


def decide_batch(scores: Tensor, counts: Tensor, per_value: bool, versions: int, alpha: float,
                 cell_bits: int) -> list[Attribution]:
    """`decide` for B texts at once: scores [B, W, cells, C] float64, counts [B, W, K] int64, on any device
    (reduced there by gpu/regions.py; only the best two values per region cross to the host)."""
    return decide_tops(region_tops(scores, counts, per_value), per_value, versions, alpha, cell_bits)


def decide_tops(tops: RegionTops, per_value: bool, versions: int, alpha: float, cell_bits: int) -> list[Attribution]:
    """`decide_batch` from the regions' best two values (gpu/regions.region_tops).

    The tails of every text's whole-text region, and of the prefix/suffix regions of the texts that pass
    the level test, are computed as arrays; only the small per-text decision is Python. Each text's
    result is the one it gets alone."""
    b, windows = tops.values.shape[0], tops.windows
    regions_at = bounds(windows)
    full = _whole(tops)
    log_v = math.log(max(versions, 1))
    log_alpha = math.log(alpha)
    level_lp = np.minimum(0.0, full.level_log_p + log_v)
    tokens = full.n.sum(1)
    out: list[Attribution] = []
    hits = []
    for i in range(b):
        att = gate(int(tokens[i]), float(level_lp[i]), log_alpha, windows)
        if att is None:
            hits.append(i)
        out.append(att)  # type: ignore[arg-type]
    decoded: list[tuple[int, _Region]] = []
    m = len(regions_at) - 1
    for lo in range(0, len(hits), REGION_CHUNK):
        idx = hits[lo : lo + REGION_CHUNK]
        scanned = _scanned(tops, idx) if m else None
        for j, i in enumerate(idx):
            rows = [_Region.of(scanned, j * m + k, *regions_at[k + 1], k + 1) for k in range(m)] if scanned else []
            lp = opened_level(float(level_lp[i]), rows, windows, log_v, log_alpha)
            if lp is None:
                out[i] = absent(float(level_lp[i]), log_alpha)
                continue
            out[i], source = decide_value(_Region.of(full, i, 0, windows, 0), rows, windows, per_value, log_v, lp,
                                     log_alpha, cell_bits)
            if source is not None:
                decoded.append((i, source))
    if decoded:  # confidence of every released value, one batched posterior over the rows fetched from the device
        src = [r for _, r in decoded]
        n, winners = np.array([r.n for r in src]), np.array([r.winners for r in src])
        conf, bit_conf = confidences(tops, [(i, r.row) for i, r in decoded], n, winners, cell_bits)
        for (i, _), cf, bc in zip(decoded, conf, bit_conf, strict=True):
            out[i].confidence, out[i].bit_confidence = cf, bc
    for i, att in enumerate(out):
        if (full.n[i] > 0).all():
            att.most_likely = join_cells(full.winners[i].tolist(), cell_bits)
    return out
