"""MPAC (Yoo et al., NAACL 2024): multi-bit watermarking via position allocation + colorlisting.

Our reading of the paper, vectorised for batched HF generation:
- the payload of n bits is split into L = n / b positions of b bits (radix r = 2^b);
- at each step a keyed hash of the previous token picks the position p (position allocation);
- a second keyed hash of (previous token, candidate token) colours the vocabulary into r lists
  (gamma = 1/r each), and delta is added to the logits of the list whose colour equals the message
  value at p (colorlisting);
- decoding counts, per position, the colours of the observed tokens and takes the argmax;
- detection scores z = (sum_p max_c count - T/r) / sqrt(T (1/r)(1 - 1/r)) over the T scored tokens.

Simplification (stated in the report): colour lists come from a keyed integer hash of
(prev token, token) rather than a seeded permutation of the vocabulary, so list sizes are equal only
in expectation. Repeated contexts are not masked (as in MPAC's default configuration).
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import LogitsProcessor

from hero_eval.baselines.common import BaselineDecode, hash2, key_int, pad_ids


class MPAC:
    def __init__(self, key: bytes, total_bits: int, bits_per_pos: int = 2, delta: float = 2.0, vocab_size: int = 0):
        if total_bits % bits_per_pos:
            raise ValueError(f"{total_bits} bits do not split into positions of {bits_per_pos} bits")
        self.total_bits = total_bits
        self.b = bits_per_pos
        self.r = 1 << bits_per_pos
        self.positions = total_bits // bits_per_pos
        self.delta = delta
        self.vocab_size = vocab_size
        self.k_pos = key_int(key, "mpac/position")
        self.k_col = key_int(key, "mpac/colour")

    @property
    def name(self) -> str:
        return f"MPAC({self.b})"

    # -- payload -------------------------------------------------------------------------------
    def values(self, bits: list[int]) -> list[int]:
        if len(bits) != self.total_bits:
            raise ValueError(f"payload has {len(bits)} bits, expected {self.total_bits}")
        out = []
        for p in range(self.positions):
            v = 0
            for x in bits[p * self.b : (p + 1) * self.b]:
                v = (v << 1) | int(x)
            out.append(v)
        return out

    # -- keyed structure -------------------------------------------------------------------------
    def position(self, prev: Tensor) -> Tensor:
        return hash2(self.k_pos, prev) % self.positions

    def colour(self, prev: Tensor, tokens: Tensor) -> Tensor:
        """Colour of `tokens` given `prev` (broadcast: prev [..., 1] with tokens [..., V], or same shape)."""
        return hash2(hash2(self.k_col, prev), tokens) % self.r

    def processor(self, payloads: list[list[int]]) -> LogitsProcessor:
        return _MPACProcessor(self, torch.tensor([self.values(p) for p in payloads], dtype=torch.int64))

    # -- decoding --------------------------------------------------------------------------------
    def decode_ids(self, batch: list[list[int]]) -> BaselineDecode:
        ids, lengths = pad_ids(batch)
        nb = ids.shape[0]
        if ids.shape[1] < 2:
            ids = torch.cat([ids, torch.zeros(nb, 2 - ids.shape[1], dtype=torch.int64)], 1)
        prev, cur = ids[:, :-1], ids[:, 1:]
        valid = torch.arange(cur.shape[1]).unsqueeze(0) < (lengths - 1).clamp(min=0).unsqueeze(1)
        pos = self.position(prev)
        col = self.colour(prev, cur)
        idx = pos * self.r + col
        counts = torch.zeros(nb, self.positions * self.r, dtype=torch.float64)
        counts.scatter_add_(1, idx, valid.to(torch.float64))
        counts = counts.view(nb, self.positions, self.r)
        best = counts.argmax(-1)
        has = counts.sum(-1) > 0
        t = valid.sum(1).to(torch.float64)
        gamma = 1.0 / self.r
        z = (counts.max(-1).values.sum(-1) - t * gamma) / torch.sqrt((t * gamma * (1 - gamma)).clamp(min=1e-9))
        bits: list[list[int | None]] = []
        for i in range(nb):
            row: list[int | None] = []
            for p in range(self.positions):
                v = int(best[i, p])
                for j in range(self.b - 1, -1, -1):
                    row.append((v >> j) & 1 if bool(has[i, p]) else None)
            bits.append(row)
        return BaselineDecode(bits=bits, score=[float(x) for x in z])


class _MPACProcessor(LogitsProcessor):
    def __init__(self, scheme: MPAC, values: Tensor):
        self.s = scheme
        self.values = values  # [B, L]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        prev = input_ids[:, -1].cpu()
        b, v = scores.shape
        pos = self.s.position(prev)
        target = self.values[torch.arange(b), pos]  # [B]
        col = self.s.colour(prev.unsqueeze(1), torch.arange(v).unsqueeze(0))  # [B, V]
        bias = (col == target.unsqueeze(1)).to(scores.dtype) * self.s.delta
        return scores + bias.to(scores.device)
