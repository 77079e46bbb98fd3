"""Window scores -> each region's best two values, reduced on the scores' own device.

The attribution scan (verifier/engine/attribution.py) reads, per text, level and region, only the two best
values and their scores; the full per-value scores cross to the host only for the few rows whose
confidence is computed. So the auditor's [B, W, cells, C] evidence never leaves the GPU.

Input: `scores` [B, W, cells, C] float64 (one level's window sums, gpu/evidence.segment_scores), `counts`
[B, W, K] int64 (scored tokens per window and segment), `per_value` (a per-value level has one cell holding
all K segments' tokens).

Regions (`bounds(W)`): R = 1 + 2(W - 1) when W > 1, else 1. Row 0 is the whole text [0, W); rows 1..W-1 the
prefixes [0, j); rows W..2W-2 the suffixes [j, W), j = 1..W-1. Sums run in a fixed order, element-wise:
the whole text and the prefixes add windows from the first, the suffixes from the last. So a text's sums
are bit for bit the same on every device and in every batch.

Output (`RegionTops`, host numpy), the whole text first: `values` [B, cells, k] and `index` [B, cells, k] of the
k = min(2, C) best values (descending), `tokens` [B, cells] int64. Most texts (human ones) are decided on the
whole text alone, so the prefix and suffix regions are reduced only for the texts that need them:
`scan(rows)` gives the same three arrays for regions 1..R-1 of those texts ([len(rows), R-1, ...]).
`region_scores(rows)` re-sums the listed (text, region) rows on the device (`region_sums`) and copies only
those [len(rows), cells, C].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


def bounds(windows: int) -> list[tuple[int, int]]:
    """The regions' window ranges [lo, hi), in row order: whole text, prefixes, suffixes."""
    if windows <= 1:
        return [(0, max(windows, 1))]
    return [(0, windows)] + [(0, j) for j in range(1, windows)] + [(j, windows) for j in range(1, windows)]


def _region_sum(scores: Tensor, lo: int, hi: int) -> Tensor:
    """Sum of windows [lo, hi) of scores [B, W, ...] in the fixed order (prefixes forward, suffixes backward)."""
    order = range(lo, hi) if lo == 0 else range(scores.shape[1] - 1, lo - 1, -1)
    acc = None
    for j in order:
        acc = scores[:, j] if acc is None else acc + scores[:, j]
    assert acc is not None
    return acc


@dataclass
class RegionTops:
    """One level's whole-text best two values, and the window scores (left on their device) for the rest."""

    values: np.ndarray
    index: np.ndarray
    tokens: np.ndarray
    scores: Tensor  # [B, W, cells, C] window scores
    counts: Tensor  # [B, W, cells] scored tokens per window and cell

    @property
    def windows(self) -> int:
        return int(self.scores.shape[1])

    def take(self, rows: Sequence[int] | np.ndarray) -> RegionTops:
        """The same figures for a subset of texts, in the given order."""
        idx = np.asarray(rows, dtype=np.int64)
        sel = torch.from_numpy(idx).to(self.scores.device)
        return RegionTops(self.values[idx], self.index[idx], self.tokens[idx], self.scores.index_select(0, sel),
                          self.counts.index_select(0, sel))

    def scan(self, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Regions 1..R-1 (prefixes, then suffixes) of texts `rows`: values, index [len, R-1, cells, k] and
        tokens [len, R-1, cells]. One running sum forward and one backward: W - 1 adds each."""
        sel = torch.as_tensor(list(rows), dtype=torch.int64, device=self.scores.device)
        sc, cn = self.scores.index_select(0, sel), self.counts.index_select(0, sel)
        w, k = sc.shape[1], min(2, sc.shape[-1])
        tops: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor]] = {}
        for forward in (True, False):
            acc = None
            for j in (range(w - 1) if forward else range(w - 1, 0, -1)):
                acc = sc[:, j] if acc is None else acc + sc[:, j]
                region = (0, j + 1) if forward else (j, w)
                best = acc.topk(k, dim=-1)  # no arithmetic: a row's result is its own
                tops[region] = (best.values, best.indices, cn[:, region[0]:region[1]].sum(1))
        parts = [tops[r] for r in bounds(w)[1:]]
        return tuple(torch.stack([r[i] for r in parts], 1).cpu().numpy() for i in range(3))  # type: ignore[return-value]

    def region_scores(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """`region_sums` copied to the host."""
        return self.region_sums(rows).cpu().numpy()

    def region_sums(self, rows: Sequence[tuple[int, int]]) -> Tensor:
        """[len(rows), cells, C] float64 on the scores' device: every value's score in region r of text b, for
        (b, r) in rows (summed in the same order as the reductions)."""
        regions = bounds(self.windows)
        out = torch.empty((len(rows), *self.scores.shape[2:]), dtype=self.scores.dtype, device=self.scores.device)
        by_region: dict[int, list[int]] = {}
        for k, (_, r) in enumerate(rows):
            by_region.setdefault(r, []).append(k)
        for r, ks in by_region.items():
            texts = torch.tensor([rows[k][0] for k in ks], device=self.scores.device)
            lo, hi = regions[r]
            out[torch.tensor(ks, device=self.scores.device)] = _region_sum(self.scores.index_select(0, texts), lo, hi)
        return out


def region_tops(scores: Tensor, counts: Tensor, per_value: bool) -> RegionTops:
    """The whole text's two best values and token counts per cell (module docstring); one small copy to the
    host. The window sum runs from window 0 forward, as every prefix does."""
    cell_counts = counts.sum(-1, keepdim=True) if per_value else counts  # [B, W, cells]
    best = _region_sum(scores, 0, scores.shape[1]).topk(min(2, scores.shape[-1]), dim=-1)
    return RegionTops(best.values.cpu().numpy(), best.indices.cpu().numpy(), cell_counts.sum(1).cpu().numpy(),
                      scores, cell_counts)


__all__ = ["RegionTops", "bounds", "region_tops"]
