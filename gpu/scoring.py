"""What every evidence backend shares: the decode settings, the key tables, and the scored tokens.

The evidence kernel (paper Alg. C.2, stage 1 + aggregation) maps a right-padded batch ids [B, T] with
lengths [B] to summed evidence per (row, window, cell, candidate). A position t >= h is scored iff
t < length and its context x[t-h:t] did not occur at an earlier scored position of the same row.
The i-th of a row's n scored tokens (0-based, in text order) lies in window floor(i * W / n), so
W = 1 is the whole text and W > 1 lets a decoder compare prefixes and suffixes (mixed texts).
A *segmented* table (v1, v2 level 1) has one cell per position segment k_t (from the position key);
a *per-value* table (v2 private levels: one key per whole field value) has a single cell. A *seeded*
table (spec v3) carries a level key: per token one SipHash seed, per candidate that seed XOR its value key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ScoringSpec:
    """The profile-derived settings one decode call needs (replaces seven repeated keywords)."""

    context_width: int
    vocab_size: int
    schedule: tuple[int, ...]
    segments: int
    stride: int = 0  # interleaved routing layout (spec section 6.1); 0 = contiguous
    windows: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", tuple(int(k) for k in self.schedule))
        if self.windows < 1 or self.segments < 1 or not 1 <= self.context_width <= 16:
            raise ValueError(f"bad scoring settings {self}")


@dataclass(frozen=True)
class LevelKeys:
    """One key table (candidates [C]) of one level, as int64 SipHash key words."""

    level: int  # 1-based
    k0: Tensor
    k1: Tensor
    per_value: bool = False  # one cell (whole-value keys) instead of one cell per position segment
    # spec v3: the level key's words ([1], [1]); the seed of candidate c is then
    # SipHash(level key, context) XOR (k0[c], k1[c]) (one SipHash per token, one Philox block per candidate)
    seed_key: tuple[Tensor, Tensor] | None = None

    @property
    def candidates(self) -> int:
        return int(self.k0.shape[0])

    def cells(self, spec: ScoringSpec) -> int:
        return 1 if self.per_value else spec.segments


@dataclass
class ScoredTokens:
    """The scored positions of a batch, flattened in (row, position) order: row, context [N, h], token,
    and window (see the module docstring)."""

    row: Tensor
    context: Tensor
    token: Tensor
    window: Tensor


def scored_tokens(ids: Tensor, lengths: Tensor, h: int, windows: int = 1) -> ScoredTokens:
    b, t = ids.shape
    ids = ids.to(torch.int64)
    dev = ids.device
    if t <= h:
        empty = torch.zeros(0, dtype=torch.int64, device=dev)
        return ScoredTokens(empty, torch.zeros(0, h, dtype=torch.int64, device=dev), empty, empty)
    ctx = ids.unfold(1, h, 1)[:, : t - h]  # [B, T-h, h]
    tok = ids[:, h:]
    pos = torch.arange(h, t, device=dev).unsqueeze(0).expand(b, -1)
    valid = pos < lengths.to(dev).unsqueeze(1)
    rows = torch.arange(b, device=dev).unsqueeze(1).expand(-1, t - h)
    flat_rows, flat_ctx, flat_tok, flat_pos = rows[valid], ctx[valid], tok[valid], pos[valid]
    if flat_rows.numel() == 0:
        return ScoredTokens(flat_rows, flat_ctx, flat_tok, flat_rows)
    keyed = torch.cat([flat_rows.unsqueeze(1), flat_ctx], dim=1)
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), t, dtype=torch.int64, device=dev)
    first = first.scatter_reduce(0, inverse, flat_pos, reduce="amin")
    keep = flat_pos == first[inverse]
    row = flat_rows[keep]
    return ScoredTokens(row, flat_ctx[keep], flat_tok[keep], token_windows(row, b, windows))


def token_windows(row: Tensor, batch: int, windows: int) -> Tensor:
    """Window of each scored token (rows sorted, tokens in text order): floor(i * W / n_row)."""
    if windows == 1 or row.numel() == 0:
        return torch.zeros_like(row)
    n = torch.bincount(row, minlength=batch)
    start = torch.cumsum(n, 0) - n
    rank = torch.arange(row.numel(), device=row.device) - start[row]
    return rank * windows // n[row]


def empty_outputs(b: int, spec: ScoringSpec, tables: list[LevelKeys], device) -> tuple[list[Tensor], Tensor]:
    scores = [
        torch.zeros(b, spec.windows, t.cells(spec), t.candidates, dtype=torch.float64, device=device) for t in tables
    ]
    return scores, torch.zeros(b, spec.windows, spec.segments, dtype=torch.int64, device=device)
