"""Decoder evidence kernel (paper Alg. C.2, stage 1 + per-segment aggregation).

ids [B, T] (right-padded), lengths [B]. Position t >= h is scored iff t < length and its context
x[t-h:t] did not occur at an earlier scored position of the same row (context masking, as in
generation). For each decoded level l and candidate a: E = -log(1 - U_a[s_{t,l}]), summed per
(row, segment). Returns scores [B, K, C_l] float64 per level and token counts [B, K].

`segment_scores` dispatches by device: CPU -> the compiled C kernel (gpu/cpu_kernel.py) when it is
available, CUDA -> the Triton kernel (gpu/triton_kernels.py) when Triton is installed, else the
pure-torch `segment_scores_torch` below (also the readable statement of the batched algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gpu import prf
from gpu.partition import routing_paths


@dataclass
class ScoredTokens:
    """The scored positions of a batch, flattened: row [N], context [N, h], token [N]."""

    row: Tensor
    context: Tensor
    token: Tensor


def scored_tokens(ids: Tensor, lengths: Tensor, h: int) -> ScoredTokens:
    b, t = ids.shape
    ids = ids.to(torch.int64)
    if t <= h:
        empty = torch.zeros(0, dtype=torch.int64, device=ids.device)
        return ScoredTokens(empty, torch.zeros(0, h, dtype=torch.int64, device=ids.device), empty)
    ctx = ids.unfold(1, h, 1)[:, : t - h]  # [B, T-h, h]
    tok = ids[:, h:]
    pos = torch.arange(h, t, device=ids.device).unsqueeze(0).expand(b, -1)
    valid = pos < lengths.to(ids.device).unsqueeze(1)
    rows = torch.arange(b, device=ids.device).unsqueeze(1).expand(-1, t - h)
    flat_rows, flat_ctx, flat_tok, flat_pos = rows[valid], ctx[valid], tok[valid], pos[valid]
    if flat_rows.numel() == 0:
        return ScoredTokens(flat_rows, flat_ctx, flat_tok)
    keyed = torch.cat([flat_rows.unsqueeze(1), flat_ctx], dim=1)
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), t, dtype=torch.int64, device=ids.device)
    first = first.scatter_reduce(0, inverse, flat_pos, reduce="amin")
    keep = flat_pos == first[inverse]
    return ScoredTokens(flat_rows[keep], flat_ctx[keep], flat_tok[keep])


@dataclass
class LevelKeys:
    """One key table (candidates [C]) of one level, as int64 SipHash key words."""

    level: int  # 1-based
    k0: Tensor
    k1: Tensor


def segment_scores_torch(
    ids: Tensor,
    lengths: Tensor,
    *,
    context_width: int,
    vocab_size: int,
    schedule: tuple[int, ...],
    segments: int,
    position_key: tuple[Tensor, Tensor],
    tables: list[LevelKeys],
    stride: int = 0,
) -> tuple[list[Tensor], Tensor]:
    b = ids.shape[0]
    st = scored_tokens(ids, lengths, context_width)
    device = ids.device
    s0, s1 = prf.prf_seed(position_key[0], position_key[1], st.context)
    seg = prf.position_of(s0, s1, segments)
    flat = st.row * segments + seg
    counts = torch.bincount(flat, minlength=b * segments).view(b, segments)
    paths = routing_paths(st.token, vocab_size, schedule, stride)
    out = []
    for table in tables:
        c = table.k0.shape[0]
        ls0, ls1 = prf.prf_seed(table.k0, table.k1, st.context.unsqueeze(1))  # [N, C]
        idx = paths[:, table.level - 1].unsqueeze(1).expand(-1, c)
        ev = prf.u32_to_evidence(prf.random_u32_indexed(ls0, ls1, idx))
        scores = torch.zeros(b * segments, c, dtype=torch.float64, device=device)
        scores.index_add_(0, flat, ev)
        out.append(scores.view(b, segments, c))
    return out, counts


BACKENDS = ("auto", "torch", "native", "triton")


def select_backend(device: torch.device | str, backend: str = "auto") -> str:
    """The implementation `segment_scores` uses for tensors on `device`."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    dev = torch.device(device)
    if dev.type == "cpu":
        from gpu import cpu_kernel

        return "native" if cpu_kernel.available() else "torch"
    if dev.type == "cuda":
        from gpu import triton_kernels

        return "triton" if triton_kernels.available() else "torch"
    return "torch"


def segment_scores(
    ids: Tensor,
    lengths: Tensor,
    *,
    context_width: int,
    vocab_size: int,
    schedule: tuple[int, ...],
    segments: int,
    position_key: tuple[Tensor, Tensor],
    tables: list[LevelKeys],
    backend: str = "auto",
    stride: int = 0,
) -> tuple[list[Tensor], Tensor]:
    """Per-(row, segment) evidence for every table; see the module docstring. Outputs on ids.device."""
    kwargs = dict(
        context_width=context_width,
        vocab_size=vocab_size,
        schedule=tuple(schedule),
        segments=segments,
        position_key=position_key,
        tables=tables,
        stride=stride,
    )
    impl = select_backend(ids.device, backend)
    if impl == "native":
        from gpu import cpu_kernel

        scores, counts = cpu_kernel.segment_scores(ids, lengths, **kwargs)
        if ids.device.type != "cpu":
            return [s.to(ids.device) for s in scores], counts.to(ids.device)
        return scores, counts
    if impl == "triton":
        from gpu import triton_kernels

        return triton_kernels.segment_scores(ids, lengths, **kwargs)
    return segment_scores_torch(ids, lengths, **kwargs)
