"""Batched HeRo generation step: hierarchical chunk routing + Gumbel-max (paper Alg. C.1).

Shapes: logits [B, V] (already temperature/top-k/top-p warped; -inf = excluded), context [B, h],
payload [B, K, L] level values, key tables k0/k1 [L, C] (C = max 2^b_l), position key scalars.
Every row is routed independently; rows with watermark=False draw from the plain distribution.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gpu import prf
from gpu.partition import chunk_start


def route_and_sample(
    logits: Tensor,
    seeds: list[tuple[Tensor, Tensor]],
    schedule: tuple[int, ...],
) -> Tensor:
    """Alg. C.1 lines 14-27 for every row: `seeds[l]` = PRF(context, K^(l)(m^(l))) as ([B], [B]).

    Returns sampled token ids [B]. Chunk masses come from a float64 prefix sum of the probabilities.
    """
    b, v = logits.shape
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    offset = torch.zeros(b, dtype=torch.int64, device=logits.device)
    size = torch.full((b,), v, dtype=torch.int64, device=logits.device)
    if schedule:
        cdf = torch.zeros(b, v + 1, dtype=torch.float64, device=logits.device)
        torch.cumsum(logp.exp(), dim=-1, out=cdf[:, 1:])
    for level, k in enumerate(schedule):
        i = torch.arange(k + 1, device=logits.device).unsqueeze(0)
        bounds = offset.unsqueeze(1) + chunk_start(size.unsqueeze(1), k, i)  # [B, k+1]
        edges = cdf.gather(1, bounds)
        mass = (edges[:, 1:] - edges[:, :-1]).clamp(min=0.0)
        s0, s1 = seeds[level]
        gumbel = prf.u32_to_gumbel(prf.random_u32_stream(s0, s1, k))
        score = torch.where(mass > 0, mass.log() + gumbel, float("-inf"))
        choice = score.argmax(dim=1, keepdim=True)
        start = bounds.gather(1, choice).squeeze(1)
        end = bounds.gather(1, choice + 1).squeeze(1)
        offset, size = start, end - start
    vmax = int(size.max())
    j = torch.arange(vmax, device=logits.device).unsqueeze(0)
    idx = (offset.unsqueeze(1) + j).clamp(max=v - 1)
    lp = logp.gather(1, idx)
    s0, s1 = seeds[len(schedule)]
    gumbel = prf.u32_to_gumbel(prf.random_u32_stream(s0, s1, vmax))
    score = torch.where((j < size.unsqueeze(1)) & torch.isfinite(lp), lp + gumbel, float("-inf"))
    return offset + score.argmax(dim=1)


class HeroSampler:
    """Key tables on the device, ready to draw one watermarked token per row per call."""

    def __init__(
        self,
        schedule: tuple[int, ...],
        segments: int,
        table_keys: list[list[bytes]],
        position_key: bytes,
        device: torch.device | str = "cpu",
    ) -> None:
        self.schedule = tuple(schedule)
        self.segments = segments
        self.levels = len(table_keys)
        if self.levels != len(self.schedule) + 1:
            raise ValueError("need one key table per level")
        width = max(len(t) for t in table_keys)
        padded = [t + [t[0]] * (width - len(t)) for t in table_keys]
        words = [prf.key_words(t, device) for t in padded]
        self.k0 = torch.stack([w[0] for w in words])  # [L, C]
        self.k1 = torch.stack([w[1] for w in words])
        pk0, pk1 = prf.key_words([position_key], device)
        self.pos_k0, self.pos_k1 = pk0[0], pk1[0]

    def positions(self, context: Tensor) -> Tensor:
        """Segment index k_t for each row's context [B, h] -> [B]."""
        s0, s1 = prf.prf_seed(self.pos_k0, self.pos_k1, context)
        return prf.position_of(s0, s1, self.segments)

    def sample(
        self,
        logits: Tensor,
        context: Tensor,
        payload: Tensor,
        watermark: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """One token per row [B]; payload [B, K, L]; watermark [B] bool (False: plain sampling)."""
        context = context.to(torch.int64)
        k = self.positions(context)
        values = payload.to(torch.int64).gather(1, k.view(-1, 1, 1).expand(-1, 1, self.levels)).squeeze(1)
        seeds = []
        for level in range(self.levels):
            m = values[:, level]
            seeds.append(prf.prf_seed(self.k0[level][m], self.k1[level][m], context))
        tokens = route_and_sample(logits, seeds, self.schedule)
        if watermark is not None and not bool(watermark.all()):
            probs = torch.softmax(logits.to(torch.float32), dim=-1)
            plain = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            tokens = torch.where(watermark, tokens, plain)
        return tokens
