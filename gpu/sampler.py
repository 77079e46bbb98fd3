"""The HeRo draw's torch parts: hierarchical chunk routing + Gumbel-max (paper Alg. C.1) and the key tables.

Shapes: logits [B, V] (already temperature/top-k/top-p warped; -inf = excluded), context [B, h],
payload [B, K, L] level values, key tables k0/k1 [L, C] (C = max 2^b_l), position key scalars.
Every row is routed independently. Which rows are marked, and the fresh draw of the others, is the fused step's
(gpu/step.py `FusedSampler.step`, the one sampling step of every generation path): `HeroSampler` holds the key
tables it draws with, `route_and_sample` is its torch backend's marked draw.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from gpu import prf
from gpu.partition import chunk_of, chunk_start, deinterleave


def _native(t: Tensor) -> bool:
    if t.device.type != "cpu":
        return False
    from gpu import cpu_kernel

    return cpu_kernel.available()


def _prf_seed(k0: Tensor, k1: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
    """prf.prf_seed for per-row keys; the C kernel on CPU (hundreds of tiny torch ops otherwise)."""
    if _native(context):
        from gpu import cpu_kernel

        return cpu_kernel.prf_seed(k0, k1, context)
    return prf.prf_seed(k0, k1, context)


def _stream(s0: Tensor, s1: Tensor, n: int) -> Tensor:
    if _native(s0):
        from gpu import cpu_kernel

        return cpu_kernel.random_u32_stream(s0, s1, n)
    return prf.random_u32_stream(s0, s1, n)


def _full_range_masses(p: Tensor, k: int) -> Tensor:
    """Chunk masses [B, k] of the level-1 partition of the whole row (contiguous chunks, two sizes)."""
    b, v = p.shape
    a, r = divmod(v, k)
    small = k - r
    parts = []
    if small:
        parts.append(p[:, : small * a].reshape(b, small, a).sum(-1) if a else p.new_zeros(b, small))
    if r:
        parts.append(p[:, small * a :].reshape(b, r, a + 1).sum(-1))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def _window_masses(p: Tensor, offset: Tensor, size: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Chunk masses [B, k] of each row's range [offset, offset + size) split into k chunks."""
    b, v = p.shape
    width = int(size.max())
    j = torch.arange(width, device=p.device).unsqueeze(0)
    idx = (offset.unsqueeze(1) + j).clamp(max=v - 1)
    w = torch.where(j < size.unsqueeze(1), p.gather(1, idx), 0.0)
    cid = chunk_of(size.unsqueeze(1), k, j).clamp(0, k - 1)
    return torch.zeros(b, k, dtype=p.dtype, device=p.device).scatter_add_(1, cid, w), j


@functools.lru_cache(maxsize=8)
def _routing_order(vocab_size: int, stride: int, device: torch.device) -> Tensor:
    """perm[y] = token at routing position y (spec section 6)."""
    return deinterleave(torch.arange(vocab_size, device=device), vocab_size, stride)


def route_and_sample(
    logits: Tensor,
    seeds: list[tuple[Tensor, Tensor]],
    schedule: tuple[int, ...],
    stride: int = 0,
) -> Tensor:
    """Alg. C.1 lines 14-27 for every row: `seeds[l]` = PRF(context, K^(l)(m^(l))) as ([B], [B]).

    Returns sampled token ids [B]. Routing levels pick argmax_i log w_i + G_i over chunk masses w_i;
    the last level picks argmax_j log p_j + G_j inside the chosen chunk only. Both are invariant to a
    common shift, so no full log-softmax is formed: masses come from one fused softmax pass (float32,
    or float64 when the logits are float64) reduced per chunk, and the last level uses the float64
    logit minus the row maximum. Gumbel noise is float64.
    """
    if stride:  # interleaved layout: route in routing order, map the winner back to its token id
        perm = _routing_order(logits.shape[1], stride, logits.device)
        return perm[route_and_sample(logits.index_select(1, perm), seeds, schedule)]
    b, v = logits.shape
    x = logits if logits.dtype == torch.float64 else logits.to(torch.float32)
    offset = torch.zeros(b, dtype=torch.int64, device=logits.device)
    size = torch.full((b,), v, dtype=torch.int64, device=logits.device)
    if schedule:
        p = torch.softmax(x, dim=-1)
    for level, k in enumerate(schedule):
        if level == 0:
            mass = _full_range_masses(p, k)
        else:
            mass, _ = _window_masses(p, offset, size, k)
        mass = mass.to(torch.float64)
        s0, s1 = seeds[level]
        gumbel = prf.u32_to_gumbel(_stream(s0, s1, k))
        score = torch.where(mass > 0, mass.log() + gumbel, float("-inf"))
        choice = score.argmax(dim=1, keepdim=True)
        start = chunk_start(size.unsqueeze(1), k, choice).squeeze(1)
        end = chunk_start(size.unsqueeze(1), k, choice + 1).squeeze(1)
        offset, size = offset + start, end - start
    vmax = int(size.max())
    j = torch.arange(vmax, device=logits.device).unsqueeze(0)
    idx = (offset.unsqueeze(1) + j).clamp(max=v - 1)
    top = x.amax(dim=1, keepdim=True).to(torch.float64)  # amax: no index pass (3-5x faster than max)
    top = torch.where(torch.isfinite(top), top, 0.0)
    lp = x.gather(1, idx).to(torch.float64) - top
    s0, s1 = seeds[len(schedule)]
    gumbel = prf.u32_to_gumbel(_stream(s0, s1, vmax))
    score = torch.where((j < size.unsqueeze(1)) & torch.isfinite(lp), lp + gumbel, float("-inf"))
    return offset + score.argmax(dim=1)


class HeroSampler:
    """A profile's key tables on the device and the seeds they give (position segment, one seed per level): what
    the fused step (gpu/step.py `FusedSampler`) draws with; it draws nothing itself."""

    def __init__(
        self,
        schedule: tuple[int, ...],
        segments: int,
        table_keys: list[list[bytes]],
        position_key: bytes,
        device: torch.device | str = "cpu",
        stride: int = 0,
        seed_keys: list[bytes | None] | None = None,
        multiplexed: bool = False,
    ) -> None:
        """`seed_keys[l]`: spec v3 level key of level l (None: v1/v2, the entry key is the SipHash key).
        `multiplexed` (spec v5): no routing (empty schedule); each marked position draws a whole token under the
        one level its lane assigns (gpu/step.py)."""
        self.schedule = tuple(schedule)
        self.stride = stride
        self.segments = segments
        self.levels = len(table_keys)
        self.multiplexed = multiplexed
        if multiplexed and (self.schedule or stride):
            raise ValueError("a multiplexed (spec v5) sampler routes nothing: empty schedule, contiguous layout")
        if not multiplexed and self.levels != len(self.schedule) + 1:
            raise ValueError("need one key table per level")
        width = max(len(t) for t in table_keys)
        padded = [t + [t[0]] * (width - len(t)) for t in table_keys]
        words = [prf.key_words(t, device) for t in padded]
        self.k0 = torch.stack([w[0] for w in words])  # [L, C]
        self.k1 = torch.stack([w[1] for w in words])
        pk0, pk1 = prf.key_words([position_key], device)
        self.pos_k0, self.pos_k1 = pk0[0], pk1[0]
        self.seed_words = [None if k is None else prf.key_words([k], device) for k in seed_keys or [None] * self.levels]

    def level_seeds(self, level: int, m: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        """Seeds [B] of level `level` (0-based) for entries m [B]: SipHash of the entry key (v1/v2), or the
        v3 level seed XOR the entry's value key (spec section 15)."""
        sw = self.seed_words[level]
        if sw is None:
            return _prf_seed(self.k0[level][m], self.k1[level][m], context)
        b = context.shape[0]
        s0, s1 = _prf_seed(sw[0].expand(b), sw[1].expand(b), context)
        return s0 ^ self.k0[level][m], s1 ^ self.k1[level][m]

    def positions(self, context: Tensor, segments: int | None = None) -> Tensor:
        """Segment index k_t for each row's context [B, h] -> [B] (`segments`: another count of equal parts of
        word 0, e.g. spec v5's 100 lanes)."""
        s0, s1 = _prf_seed(self.pos_k0, self.pos_k1, context)
        u0 = _stream(s0, s1, 1)[:, 0]
        return (u0 * (segments or self.segments)) >> 32
