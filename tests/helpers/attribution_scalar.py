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
- Confidence = posterior probability that the released value is exactly right: uniform prior over the
  values, every other value's score exactly Gamma(n, 1), the true value's approximately Normal(n m, v n)
  with its mean evidence per token m integrated over a grid (not plugged in); segments share m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from verifier.engine import stats

# Confidence model: a value no source carried scores Gamma(n, 1) (exact, the null); the true value's score
# is approximately Normal(n m, v n), m its mean evidence per token (uniform prior on MEAN_GRID) and v the
# per-token variance of the chosen token's evidence -log(1 - U), which lies between 1 (a certain token)
# and pi^2/6 (a uniform choice among many), so v = 1.3.
MEAN_GRID = torch.linspace(1.0, 10.0, 91, dtype=torch.float64)
TRUE_VARIANCE = 1.3
# A segmented value (whole text or a region) is released only if no segment's runner-up has p <= 1e-3:
# a weakly supported second value in one segment may mean the winners come from two sources. Costs
# about K x 1e-3 of single-source releases (a null runner-up's p-value is uniform).
LOG_QUIET = math.log(1e-3)


@dataclass(frozen=True)
class LevelEvidence:
    """One level at one key version: scores [W, cells, C] float64 and counts [W, K] int64 (CPU)."""

    scores: Tensor
    counts: Tensor
    per_value: bool
    versions: int = 1


@dataclass(frozen=True)
class Candidate:
    value: int
    log_p: float
    tokens: int


@dataclass(frozen=True)
class Span:
    start: int  # scored-token rank, inclusive
    end: int  # exclusive
    value: int


@dataclass
class Attribution:
    status: str  # decoded | absent | mixed | undecodable
    log_p: float  # the level's whole-text p-value (log), versions included
    value: int | None = None  # whole level value (segments concatenated, segment 0 most significant)
    confidence: float = 0.0
    bit_confidence: list[float | None] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    reason: str | None = None
    most_likely: int | None = None  # whole-text argmax value, supported or not (evaluation only)


@dataclass(frozen=True)
class _Region:
    lo: int  # windows [lo, hi)
    hi: int
    scores: Tensor  # [cells, C]
    n: Tensor  # [cells] scored tokens per cell
    winners: list[int]
    log_p1: list[float]  # per cell: max-of-C tail of the winner (0.0 for a cell without tokens)
    log_p2: list[float]  # per cell: max-of-(C-1) tail of the runner-up

    @property
    def tokens(self) -> int:
        return int(self.n.sum())

    def level_log_p(self) -> float:
        return stats.log_fisher([lp for lp, n in zip(self.log_p1, self.n.tolist(), strict=True) if n > 0])


def _region(ev: LevelEvidence, lo: int, hi: int) -> _Region:
    s = ev.scores[lo:hi].sum(0) if hi - lo > 1 else ev.scores[lo]
    counts = ev.counts[lo:hi].sum(0)
    n = counts.sum().view(1) if ev.per_value else counts
    c = s.shape[1]
    top = s.topk(min(2, c), dim=1)
    winners, lp1, lp2 = [], [], []
    for k in range(s.shape[0]):
        nk = int(n[k])
        winners.append(int(top.indices[k, 0]))
        if nk == 0:
            lp1.append(0.0)
            lp2.append(0.0)
            continue
        lp1.append(stats.log_max_pvalue(stats.log_gamma_sf(nk, float(top.values[k, 0])), c))
        lp2.append(stats.log_max_pvalue(stats.log_gamma_sf(nk, float(top.values[k, 1])), c - 1) if c > 1 else 0.0)
    return _Region(lo, hi, s, n, winners, lp1, lp2)


def _join(winners: list[int], bits: int) -> int:
    v = 0
    for w in winners:
        v = (v << bits) | w
    return v


def _log_lr(scores: Tensor, n: Tensor) -> Tensor:
    """log [N(S; n m, v n) / Gamma(n, 1) density at S] for every mean m of MEAN_GRID: [G, cells, C]."""
    nk = n.to(torch.float64).view(1, -1, 1)
    s = scores.unsqueeze(0)
    m = MEAN_GRID.view(-1, 1, 1)
    log_normal = -0.5 * (s - nk * m) ** 2 / (TRUE_VARIANCE * nk) - 0.5 * torch.log(2 * math.pi * TRUE_VARIANCE * nk)
    log_gamma = (nk - 1) * torch.log(s.clamp_min(1e-300)) - s - torch.lgamma(nk)
    return log_normal - log_gamma


def posterior(scores: Tensor, n: Tensor, winners: list[int]) -> tuple[float, Tensor]:
    """(P[value == winners], per-cell marginals [cells, C]); see the module docstring."""
    live = n > 0
    s = scores[live]
    if s.numel() == 0:
        return 0.0, torch.full_like(scores, 1.0 / scores.shape[1])
    c = s.shape[1]
    logits = _log_lr(s, n[live])  # [G, cells, C]
    log_z = torch.logsumexp(logits, dim=2)  # [G, cells]
    w = torch.softmax((log_z - math.log(c)).sum(1), 0)  # posterior over the mean (uniform prior on the grid)
    log_post = logits - log_z.unsqueeze(2)
    idx = torch.tensor([wv for wv, ok in zip(winners, live.tolist(), strict=True) if ok])
    joint = log_post.gather(2, idx.view(1, -1, 1).expand(log_post.shape[0], -1, 1)).squeeze(2).sum(1)  # [G]
    conf = float((w * joint.exp()).sum())
    marg = torch.full_like(scores, 1.0 / scores.shape[1])
    marg[live] = (w.view(-1, 1, 1) * log_post.exp()).sum(0)
    return min(1.0, conf), marg


def _bit_confidence(marg: Tensor, n: Tensor, winners: list[int], bits: int) -> list[float | None]:
    out: list[float | None] = []
    cand = torch.arange(marg.shape[1])
    for k in range(marg.shape[0]):
        for i in range(bits - 1, -1, -1):
            if int(n[k]) == 0:
                out.append(None)
                continue
            agree = ((cand >> i) & 1) == ((winners[k] >> i) & 1)
            out.append(float(marg[k][agree].sum()))
    return out


def decide(ev: LevelEvidence, alpha: float, cell_bits: int) -> Attribution:
    """The level's status and released value; `cell_bits` = bits per cell (b, or the whole value's)."""
    full = _region(ev, 0, ev.scores.shape[0])
    att = _decide(ev, alpha, cell_bits, full)
    if all(int(n) > 0 for n in full.n):
        att.most_likely = _join(full.winners, cell_bits)
    return att


def _decide(ev: LevelEvidence, alpha: float, cell_bits: int, full: _Region) -> Attribution:
    """`full`: the whole-text region (windows [0, W)), computed once by `decide`."""
    windows = ev.scores.shape[0]
    if full.tokens == 0:
        return Attribution("undecodable", 0.0, reason="no scored tokens (text too short or fully repetitive)")
    log_v = math.log(max(ev.versions, 1))
    level_lp = min(0.0, full.level_log_p() + log_v)
    log_alpha = math.log(alpha)
    if level_lp > log_alpha:
        return Attribution("absent", level_lp, reason=f"no evidence for this level (p = {stats.to_p(level_lp):.3g})")
    regions = [_region(ev, 0, j) for j in range(1, windows)] + [_region(ev, j, windows) for j in range(1, windows)]
    scan = log_v + (math.log(2 * (windows - 1) + 1) if windows > 1 else 0.0)
    cells = len(full.winners)
    cell_alpha = log_alpha - math.log(cells)  # per-cell threshold: alpha / K (alpha for one cell)

    def supported(r: _Region, extra: float) -> bool:
        return all(int(n) > 0 and lp + extra <= cell_alpha for lp, n in zip(r.log_p1, r.n.tolist(), strict=True))

    def clean(r: _Region, extra: float) -> bool:
        return all(lp + extra > cell_alpha for lp, n in zip(r.log_p2, r.n.tolist(), strict=True) if int(n) > 0)

    def quiet(r: _Region) -> bool:
        """No segment's runner-up is even weakly significant: releasing a segmented value needs this."""
        return all(lp > LOG_QUIET for lp, n in zip(r.log_p2, r.n.tolist(), strict=True) if int(n) > 0)

    found: dict[int, Candidate] = {}
    by_region: dict[tuple[int, int], tuple[int, float]] = {}

    def add(value: int, log_p: float, tokens: int) -> None:
        if value not in found or log_p < found[value].log_p:
            found[value] = Candidate(value, min(0.0, log_p), tokens)

    two_in_a_cell = not clean(full, scan)
    # A segmented level's winners may come from different sources when a segment holds two: then the
    # whole-text value is not released (it could be a value neither source carried).
    whole_ok = supported(full, log_v) and (ev.per_value or quiet(full))
    full_value = _join(full.winners, cell_bits) if whole_ok else None
    if full_value is not None:
        add(full_value, level_lp, full.tokens)
    if ev.per_value and two_in_a_cell:  # the runner-up is a second supported value
        top2 = full.scores[0].topk(2).indices.tolist()
        add(int(top2[1]), full.log_p2[0] + scan, full.tokens)
    for r in regions:
        if r.tokens and supported(r, scan) and (ev.per_value or quiet(r)):
            v = _join(r.winners, cell_bits)
            lp = r.log_p1[0] + scan if ev.per_value else r.level_log_p() + scan
            add(v, lp, r.tokens)
            by_region[(r.lo, r.hi)] = (v, lp)
    ranked = sorted(found.values(), key=lambda c: c.log_p)
    if len(ranked) >= 2 or two_in_a_cell:
        if not ev.per_value:
            # Segment winners of a mixed text may pair segments of different sources: name no value.
            return Attribution("mixed", level_lp, reason=(
                "two or more sources: some segments carry two supported values; a segmented level cannot "
                "attribute whole values to them"))
        return Attribution("mixed", level_lp, candidates=ranked, spans=_spans(by_region, windows, ev),
                           reason="two or more values are each supported by their own evidence")
    if not ranked:
        weak = [k for k, (lp, n) in enumerate(zip(full.log_p1, full.n.tolist(), strict=True))
                if n == 0 or lp + log_v > cell_alpha]
        return Attribution("absent", level_lp, reason=(
            f"watermark evidence for this level (p = {stats.to_p(level_lp):.3g}) but segments {weak} lack "
            "their own evidence: no value is released"))
    value = ranked[0].value
    source = full if full_value == value else next(
        r for r in regions if by_region.get((r.lo, r.hi), (None,))[0] == value)
    conf, marg = posterior(source.scores, source.n, source.winners)
    return Attribution("decoded", level_lp, value=value, confidence=conf,
                       bit_confidence=_bit_confidence(marg, source.n, source.winners, cell_bits))


def _spans(by_region: dict[tuple[int, int], tuple[int, float]], windows: int, ev: LevelEvidence) -> list[Span]:
    """One change point: the window boundary whose prefix and suffix name two different values with the
    strongest joint evidence (smallest sum of their log p-values)."""
    n = int(ev.counts.sum())
    best = None
    for j in range(1, windows):
        a, b = by_region.get((0, j)), by_region.get((j, windows))
        if a is None or b is None or a[0] == b[0]:
            continue
        if best is None or a[1] + b[1] < best[0]:
            best = (a[1] + b[1], j, a[0], b[0])
    if best is None:
        return []
    _, j, a, b = best
    cut = -(-j * n // windows)  # first scored rank of window j: ceil(j n / W)
    return [Span(0, cut, a), Span(cut, n, b)]
