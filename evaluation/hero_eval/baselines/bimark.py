"""BiMark (Feng et al., 2025): unbiased multilayer watermarking with bit-flip reweighting.

Our reading of the paper, vectorised for batched HF generation:
- d layers; layer i owns a keyed balanced partition of the vocabulary into halves V_i^0 / V_i^1;
- at each step a keyed hash of the previous token allocates the step to one message bit m_p and draws
  a fair pseudo-random coin c_i per layer; the favoured half of layer i is e_i = c_i XOR m_p
  (the XOR mask keeps e_i a fair coin, which is what makes the scheme unbiased);
- bit-flip reweighting, applied layer after layer: with a = P(V_i^{e_i}), the favoured half's mass
  becomes a + delta * a * (1 - a) and the other half's 1 - that, each half rescaled proportionally.
  Averaged over the fair coin the distribution is unchanged (E_e[P'] = P), so the scheme is unbiased;
- decoding: every scored token votes, in every layer, for m_p = [token in V_i^1] XOR c_i; per-bit
  majority over all votes; detection score = sum_p |ones_p - zeros_p| / sqrt(votes).

Simplifications (stated in the report): partitions are per-layer keyed permutations that do not
depend on the context (the context enters through the coins); delta = 1 per layer; the context is the
previous h = 4 tokens (the paper's experiments use context width 4), and, as for HeRo, a context that
already occurred in the continuation is neither watermarked nor scored. Without that masking, 20 layers
at delta = 1 make the per-step distribution so peaked that a repeated context re-draws the same token
and generation falls into loops (median generator PPL 6.7 vs 41.7 unwatermarked in a first run).
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import LogitsProcessor

from hero_eval.baselines.common import BaselineDecode, hash2, key_int, pad_ids


class BiMark:
    def __init__(
        self,
        key: bytes,
        total_bits: int,
        layers: int = 20,
        delta: float = 1.0,
        vocab_size: int = 49152,
        context_width: int = 4,
    ):
        if not 0 < delta <= 1:
            raise ValueError("delta must be in (0, 1]")
        self.h = context_width
        self.total_bits = total_bits
        self.d = layers
        self.delta = delta
        self.vocab_size = vocab_size
        self.k_pos = key_int(key, "bimark/position")
        self.k_coin = key_int(key, "bimark/coin")
        half = torch.zeros(layers, vocab_size, dtype=torch.bool)
        for i in range(layers):
            g = torch.Generator().manual_seed(key_int(key, f"bimark/partition/{i}"))
            half[i, torch.randperm(vocab_size, generator=g)[: vocab_size // 2]] = True
        self.half = half  # [d, V]: True = token in V_i^1

    @property
    def name(self) -> str:
        return f"BiMark({self.d})"

    def context_hash(self, ctx: Tensor) -> Tensor:
        """[..., h] context tokens -> [...] 32-bit context hash."""
        x = torch.zeros(ctx.shape[:-1], dtype=torch.int64)
        for j in range(ctx.shape[-1]):
            x = hash2(x, ctx[..., j])
        return x

    def position(self, chash: Tensor) -> Tensor:
        return hash2(self.k_pos, chash) % self.total_bits

    def coins(self, chash: Tensor) -> Tensor:
        """[..., d] fair pseudo-random coins from the context hash."""
        seed = hash2(self.k_coin, chash).unsqueeze(-1)
        return hash2(seed, torch.arange(self.d)) & 1

    def processor(self, payloads: list[list[int]]) -> LogitsProcessor:
        for p in payloads:
            if len(p) != self.total_bits:
                raise ValueError(f"payload has {len(p)} bits, expected {self.total_bits}")
        return _BiMarkProcessor(self, torch.tensor(payloads, dtype=torch.int64))

    def reweight(self, probs: Tensor, favoured: Tensor) -> Tensor:
        """probs [B, V] (float64), favoured [B, d] in {0,1} -> reweighted probs."""
        p = probs
        half = self.half.to(p.dtype)  # [d, V]
        for i in range(self.d):
            a1 = (p @ half[i]).unsqueeze(1)  # mass of V_i^1, [B, 1]
            fav1 = favoured[:, i].bool().unsqueeze(1)
            a = torch.where(fav1, a1, 1 - a1)  # mass of the favoured half
            new_a = a + self.delta * a * (1 - a)
            sf = torch.where(a > 0, new_a / a.clamp(min=1e-300), 1.0)
            so = torch.where(a < 1, (1 - new_a) / (1 - a).clamp(min=1e-300), 1.0)
            s1 = torch.where(fav1, sf, so)  # scale of V_i^1
            s0 = torch.where(fav1, so, sf)  # scale of V_i^0
            p = p * (s0 + (s1 - s0) * half[i].unsqueeze(0))
        return p

    def decode_ids(self, batch: list[list[int]]) -> BaselineDecode:
        h = self.h
        ids, lengths = pad_ids(batch)
        nb = ids.shape[0]
        if ids.shape[1] < h + 1:
            ids = torch.cat([ids, torch.zeros(nb, h + 1 - ids.shape[1], dtype=torch.int64)], 1)
        ctx = ids.unfold(1, h, 1)[:, :-1]  # [B, S-h, h]: context of token j+h
        cur = ids[:, h:]
        valid = torch.arange(cur.shape[1]).unsqueeze(0) < (lengths - h).clamp(min=0).unsqueeze(1)
        chash = self.context_hash(ctx)  # [B, S-h]
        for i, row in enumerate(chash.tolist()):  # score the first occurrence of each context only
            seen: set[int] = set()
            for j in range(int(valid[i].sum())):
                if row[j] in seen:
                    valid[i, j] = False
                seen.add(row[j])
        pos = self.position(chash)
        coins = self.coins(chash)  # [B, S-h, d]
        side = self.half.T[cur.clamp(0, self.vocab_size - 1)].to(torch.int64)  # [B, S-h, d]
        ones = ((side ^ coins).sum(-1) * valid).to(torch.float64)  # votes for m_p = 1
        votes = (valid * self.d).to(torch.float64)
        c1 = torch.zeros(nb, self.total_bits, dtype=torch.float64).scatter_add_(1, pos, ones)
        n = torch.zeros(nb, self.total_bits, dtype=torch.float64).scatter_add_(1, pos, votes)
        c0 = n - c1
        score = (c1 - c0).abs().sum(-1) / torch.sqrt(n.sum(-1).clamp(min=1.0))
        bits: list[list[int | None]] = []
        for i in range(nb):
            bits.append([(int(c1[i, p] >= c0[i, p]) if n[i, p] > 0 else None) for p in range(self.total_bits)])
        return BaselineDecode(bits=bits, score=[float(x) for x in score])


class _BiMarkProcessor(LogitsProcessor):
    def __init__(self, scheme: BiMark, payload: Tensor):
        self.s = scheme
        self.payload = payload  # [B, n] bits
        self.prompt_length: int | None = None
        self.seen: list[set[int]] = [set() for _ in range(payload.shape[0])]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, s = input_ids.shape
        if self.prompt_length is None:
            self.prompt_length = s
        h = self.s.h
        chash = self.s.context_hash(input_ids[:, -h:].cpu())
        mark = torch.ones(b, dtype=torch.bool)
        if s - self.prompt_length >= h:  # the context lies in the continuation: the decoder sees it
            for i, c in enumerate(chash.tolist()):
                if c in self.seen[i]:
                    mark[i] = False
                self.seen[i].add(c)
        pos = self.s.position(chash)
        m = self.payload[torch.arange(b), pos]  # [B]
        favoured = self.s.coins(chash) ^ m.unsqueeze(1)  # [B, d]
        probs = torch.softmax(scores.double().cpu(), dim=-1)
        p = self.s.reweight(probs, favoured)
        p = torch.where(mark.unsqueeze(1), p, probs)
        return torch.log(p).to(scores.dtype).to(scores.device)
