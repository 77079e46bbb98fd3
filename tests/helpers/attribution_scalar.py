"""Oracle for tests: the attribution decision as it was written before it was batched (engine/attribution.py
until f6e85fc), one region and one cell at a time with the scalar tails of engine/stats.py. The batched
engine must give every text the verdict this gives it (tests/engine/test_attribution_batch.py). Data types and
constants are the engine's; the algorithm here is deliberately the old, independent one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from verifier.engine import stats
from verifier.engine.attribution import MEAN_GRID, TRUE_VARIANCE, LevelEvidence
from verifier.engine.verdicts import LOG_QUIET, Attribution, Candidate, _spans, not_significant
from verifier.engine.verdicts import join_cells as _join


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
    regions = [_region(ev, 0, j) for j in range(1, windows)] + [_region(ev, j, windows) for j in range(1, windows)]
    scan = log_v + (math.log(2 * (windows - 1) + 1) if windows > 1 else 0.0)
    if level_lp > log_alpha:
        # spec 16.3: a region may open the level at alpha / (m + 1) when the whole text shows p <= 1e-2
        best = min((r.level_log_p() + scan for r in regions if r.tokens), default=0.0)
        if windows == 1 or level_lp > math.log(1e-2) or best > log_alpha:
            return Attribution("absent", level_lp, reason=not_significant(level_lp, log_alpha))
        level_lp = min(0.0, best)
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
        return Attribution("mixed", level_lp, candidates=ranked, spans=_spans(by_region, windows, int(ev.counts.sum())),
                           reason="two or more values are each supported by their own evidence")
    if not ranked:
        weak = [k for k, (lp, n) in enumerate(zip(full.log_p1, full.n.tolist(), strict=True))
                if n == 0 or lp + log_v > cell_alpha]
        return Attribution("detected", level_lp, reason=(
            f"value withheld: watermark evidence for this level (p = {stats.to_p(level_lp):.3g}) but segments "
            f"{weak} lack their own evidence"))
    value = ranked[0].value
    source = full if full_value == value else next(
        r for r in regions if by_region.get((r.lo, r.hi), (None,))[0] == value)
    conf, marg = posterior(source.scores, source.n, source.winners)
    return Attribution("decoded", level_lp, value=value, confidence=conf,
                       bit_confidence=_bit_confidence(marg, source.n, source.winners, cell_bits))
