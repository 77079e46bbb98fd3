"""What every evidence backend shares: the decode settings, the key tables, and the scored tokens.

The evidence kernel (paper Alg. C.2, stage 1 + aggregation) maps a right-padded batch ids [B, T] with
lengths [B] to summed evidence per (row, window, cell, candidate). A position t >= h is scored iff
t < length and its context x[t-h:t] did not occur at an earlier scored position of the same row.
The i-th of a row's n scored tokens (0-based, in text order) lies in window floor(i * W / n), so
W = 1 is the whole text and W > 1 lets a decoder compare prefixes and suffixes (mixed texts).
A *segmented* table (v1, v2 level 1) has one cell per position segment k_t (from the position key);
a *per-value* table (v2 private levels: one key per whole field value) has a single cell. A *seeded*
table (spec v3) carries a level key: per token one SipHash seed, per candidate that seed XOR its value key.
A *read filter* (spec v5, `ReadFilter`) keeps only the scored positions one level reads under one hypothesis
(segments are then the 100 lanes); windows and counts are taken over the kept positions only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

READ_LANES = 100  # spec v5 lanes: a position's lane is its segment with 100 segments


@dataclass(frozen=True)
class ReadFilter:
    """Spec v5 (docs/spec.md section 19): keep the scored positions whose level is `level`. A position's lane
    q = (u0 * 100) >> 32 (its segment, with 100 segments); its level is 1 if q < P, else
    2 + (q - P)(depth - 1) div (100 - P), where P = `front_public` at text index t < `front_tokens` and `public`
    elsewhere (the `verbatim` hypothesis), or `public` everywhere (`excerpt`)."""

    front_tokens: int
    front_public: int
    public: int
    depth: int
    level: int
    excerpt: bool = False

    def __post_init__(self) -> None:
        ok = (self.front_tokens >= 0 and 0 <= self.front_public <= READ_LANES and 0 <= self.public <= READ_LANES
              and 1 <= self.level <= self.depth)
        if not ok:
            raise ValueError(f"bad read filter {self}")

    def words(self) -> tuple[int, ...]:
        """The filter as the C kernel's int64 words."""
        return (self.front_tokens, self.front_public, self.public, self.depth, self.level, int(self.excerpt))

    def keep(self, position: Tensor, lane: Tensor) -> Tensor:
        """Whether each scored position (text index, lane) is read (vectorised `v5_level(...) == level`)."""
        if self.excerpt:
            pct = torch.full_like(position, self.public)
        else:
            pct = torch.where(position < self.front_tokens, self.front_public, self.public)
        deeper = 2 + (lane - pct).clamp(min=0) * (self.depth - 1) // (READ_LANES - pct).clamp(min=1)
        return torch.where(lane < pct, 1, deeper) == self.level


@dataclass(frozen=True)
class ScoringSpec:
    """The profile-derived settings one decode call needs (replaces seven repeated keywords)."""

    context_width: int
    vocab_size: int
    schedule: tuple[int, ...]
    segments: int
    stride: int = 0  # interleaved routing layout (spec section 6.1); 0 = contiguous
    windows: int = 1
    read: ReadFilter | None = None  # spec v5: score only the positions one level reads (segments = lanes)

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", tuple(int(k) for k in self.schedule))
        if self.windows < 1 or self.segments < 1 or not 1 <= self.context_width <= 16:
            raise ValueError(f"bad scoring settings {self}")
        if self.read is not None and self.segments != READ_LANES:
            raise ValueError(f"a read filter needs {READ_LANES} segments (the lanes), not {self.segments}")


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
    window (see the module docstring) and text index."""

    row: Tensor
    context: Tensor
    token: Tensor
    window: Tensor
    position: Tensor


def scored_tokens(ids: Tensor, lengths: Tensor, h: int, windows: int = 1) -> ScoredTokens:
    b, t = ids.shape
    ids = ids.to(torch.int64)
    dev = ids.device
    if t <= h:
        empty = torch.zeros(0, dtype=torch.int64, device=dev)
        return ScoredTokens(empty, torch.zeros(0, h, dtype=torch.int64, device=dev), empty, empty, empty)
    ctx = ids.unfold(1, h, 1)[:, : t - h]  # [B, T-h, h]
    tok = ids[:, h:]
    pos = torch.arange(h, t, device=dev).unsqueeze(0).expand(b, -1)
    valid = pos < lengths.to(dev).unsqueeze(1)
    rows = torch.arange(b, device=dev).unsqueeze(1).expand(-1, t - h)
    flat_rows, flat_ctx, flat_tok, flat_pos = rows[valid], ctx[valid], tok[valid], pos[valid]
    if flat_rows.numel() == 0:
        return ScoredTokens(flat_rows, flat_ctx, flat_tok, flat_rows, flat_pos)
    keyed = torch.cat([flat_rows.unsqueeze(1), flat_ctx], dim=1)
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), t, dtype=torch.int64, device=dev)
    first = first.scatter_reduce(0, inverse, flat_pos, reduce="amin")
    keep = flat_pos == first[inverse]
    row = flat_rows[keep]
    return ScoredTokens(row, flat_ctx[keep], flat_tok[keep], token_windows(row, b, windows), flat_pos[keep])


def read_tokens(st: ScoredTokens, lane: Tensor, spec: ScoringSpec, batch: int) -> tuple[ScoredTokens, Tensor]:
    """The scored tokens `spec.read` keeps (all of them without a filter) and their lanes, windows assigned by
    rank among the kept tokens of each row."""
    if spec.read is None:
        return st, lane
    k = spec.read.keep(st.position, lane)
    row = st.row[k]
    kept = ScoredTokens(row, st.context[k], st.token[k], token_windows(row, batch, spec.windows), st.position[k])
    return kept, lane[k]


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
