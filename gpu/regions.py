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

Output (`RegionTops`, host numpy): `values` [B, R, cells, k] and `index` [B, R, cells, k] of the k = min(2, C)
best values (descending), `tokens` [B, R, cells] int64. `region_scores(rows)` re-sums the listed (text,
region) rows on the device (`region_sums`) and copies only those [len(rows), cells, C].
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
    """One level's regions reduced to their best two values (see the module docstring for shapes)."""

    values: np.ndarray
    index: np.ndarray
    tokens: np.ndarray
    scores: Tensor  # [B, W, cells, C] window scores, left on their device for `region_scores`

    @property
    def windows(self) -> int:
        return int(self.scores.shape[1])

    def take(self, rows: Sequence[int] | np.ndarray) -> RegionTops:
        """The same figures for a subset of texts, in the given order."""
        idx = np.asarray(rows, dtype=np.int64)
        sel = torch.from_numpy(idx).to(self.scores.device)
        return RegionTops(self.values[idx], self.index[idx], self.tokens[idx], self.scores.index_select(0, sel))

    def region_scores(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """`region_sums` copied to the host."""
        return self.region_sums(rows).cpu().numpy()

    def region_sums(self, rows: Sequence[tuple[int, int]]) -> Tensor:
        """[len(rows), cells, C] float64 on the scores' device: every value's score in region r of text b, for
        (b, r) in rows (re-summed in the same order as `region_tops`)."""
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
    """Every region's two best values and token counts (module docstring); one small copy to the host.
    One running sum forward (prefixes, then the whole text) and one backward (suffixes): W - 1 adds each."""
    w, k = scores.shape[1], min(2, scores.shape[-1])
    cell_counts = counts.sum(-1, keepdim=True) if per_value else counts  # [B, W, cells]
    tops: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor]] = {}
    for lo, order in ((0, range(w)), (w, range(w - 1, 0, -1))):
        acc = None
        for j in order:
            acc = scores[:, j] if acc is None else acc + scores[:, j]
            region = (0, j + 1) if lo == 0 else (j, w)
            best = acc.topk(k, dim=-1)  # no arithmetic: a row's result is its own
            tops[region] = (best.values, best.indices, cell_counts[:, region[0]:region[1]].sum(1))
    rows = [tops[r] for r in bounds(w)]
    return RegionTops(*(torch.stack([r[i] for r in rows], 1).cpu().numpy() for i in range(3)), scores)


__all__ = ["RegionTops", "bounds", "region_tops"]
