"""SipHash-2-4-128 and Philox4x32-10 over torch int64 tensors (spec sections 4-5).

Unsigned 64-bit words are carried in int64 (two's complement; +, *, << wrap modulo 2^64 on CPU and
CUDA). Right shifts are arithmetic in torch, so every logical shift masks the sign-extended bits.
Unsigned 32-bit Philox words live in the low half of an int64. Shapes broadcast: keys [C] against
contexts [N, 1] give seeds [N, C].
"""

from __future__ import annotations

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF


def s64(x: int) -> int:
    """Unsigned 64-bit constant -> the int64 with the same bits."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _rotl(x: Tensor, b: int) -> Tensor:
    return (x << b) | ((x >> (64 - b)) & ((1 << b) - 1))


def _sipround(v0: Tensor, v1: Tensor, v2: Tensor, v3: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    v0 = v0 + v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = v2 + v3
    v3 = _rotl(v3, 16) ^ v2
    v0 = v0 + v3
    v3 = _rotl(v3, 21) ^ v0
    v2 = v2 + v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def key_words(keys: list[bytes], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """16-byte SipHash keys -> (k0, k1) int64 tensors [C] (little-endian words)."""
    k0 = [s64(int.from_bytes(k[:8], "little")) for k in keys]
    k1 = [s64(int.from_bytes(k[8:16], "little")) for k in keys]
    return (
        torch.tensor(k0, dtype=torch.int64, device=device),
        torch.tensor(k1, dtype=torch.int64, device=device),
    )


def context_words(context: Tensor) -> list[Tensor]:
    """[N, h] token ids -> SipHash message words (each [N]) incl. the final length/tail block."""
    context = context.to(torch.int64) & MASK32
    h = context.shape[-1]
    words = [context[..., 2 * i] | (context[..., 2 * i + 1] << 32) for i in range(h // 2)]
    last = torch.full_like(context[..., 0], s64(((4 * h) & 0xFF) << 56))
    if h % 2:
        last = last | context[..., h - 1]
    words.append(last)
    return words


def siphash24_128(k0: Tensor, k1: Tensor, words: list[Tensor]) -> tuple[Tensor, Tensor]:
    """SipHash-2-4 with 128-bit output over pre-packed message words; returns (lo, hi)."""
    v0 = k0 ^ s64(0x736F6D6570736575)
    v1 = k1 ^ s64(0x646F72616E646F6D ^ 0xEE)
    v2 = k0 ^ s64(0x6C7967656E657261)
    v3 = k1 ^ s64(0x7465646279746573)
    for m in words:
        v3 = v3 ^ m
        v0, v1, v2, v3 = _sipround(*_sipround(v0, v1, v2, v3))
        v0 = v0 ^ m
    v2 = v2 ^ 0xEE
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    lo = v0 ^ v1 ^ v2 ^ v3
    v1 = v1 ^ 0xDD
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return lo, v0 ^ v1 ^ v2 ^ v3


def prf_seed(k0: Tensor, k1: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
    """Seeds for keys (k0, k1) [..] x contexts [.., h] (broadcast over leading dims)."""
    return siphash24_128(k0, k1, context_words(context))


_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, k0: Tensor, k1: Tensor) -> tuple[Tensor, ...]:
    """Philox4x32-10 on uint32 words held in int64 (broadcasting)."""
    for r in range(10):
        p0 = c0 * _M0
        p1 = c2 * _M1
        c0, c1, c2, c3 = (
            ((p1 >> 32) & MASK32) ^ c1 ^ k0,
            p1 & MASK32,
            ((p0 >> 32) & MASK32) ^ c3 ^ k1,
            p0 & MASK32,
        )
        if r < 9:
            k0 = (k0 + _W0) & MASK32
            k1 = (k1 + _W1) & MASK32
    return c0, c1, c2, c3


def _split_seed(s0: Tensor, s1: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return s0 & MASK32, (s0 >> 32) & MASK32, s1 & MASK32, (s1 >> 32) & MASK32


def random_u32_indexed(s0: Tensor, s1: Tensor, j: Tensor) -> Tensor:
    """Stream word j of seed (s0, s1): lane j%4 of Philox block (j//4, 0, s1.lo, s1.hi) keyed by s0."""
    k0, k1, sub0, sub1 = _split_seed(s0, s1)
    j = j.to(torch.int64)
    block = j >> 2
    out = philox4x32_10(block & MASK32, (block >> 32) & MASK32, sub0, sub1, k0, k1)
    lane = j & 3
    return torch.where(
        lane == 0, out[0], torch.where(lane == 1, out[1], torch.where(lane == 2, out[2], out[3]))
    )


def random_u32_stream(s0: Tensor, s1: Tensor, n: int) -> Tensor:
    """Words 0..n-1 of each seed's stream: seeds [N] -> [N, n] (Philox blocks, 4 words each)."""
    k0, k1, sub0, sub1 = (x.unsqueeze(-1) for x in _split_seed(s0, s1))
    nblocks = (n + 3) // 4
    block = torch.arange(nblocks, dtype=torch.int64, device=s0.device)
    out = philox4x32_10(block & MASK32, (block >> 32) & MASK32, sub0, sub1, k0, k1)
    return torch.stack(out, dim=-1).flatten(-2)[..., :n]


def u32_to_uniform(u: Tensor) -> Tensor:
    """U = (u + 1/2) / 2^32 in float64: exact, strictly inside (0, 1)."""
    return (u.to(torch.float64) + 0.5) * (1.0 / 4294967296.0)


def u32_to_evidence(u: Tensor) -> Tensor:
    """-log(1 - U) from the exact float64 value 1 - U = (2^32 - 1/2 - u) / 2^32."""
    return -torch.log((4294967295.5 - u.to(torch.float64)) * (1.0 / 4294967296.0))


def u32_to_gumbel(u: Tensor) -> Tensor:
    """Gumbel noise -log(-log U) in float64."""
    return -torch.log(-torch.log(u32_to_uniform(u)))


def position_of(s0: Tensor, s1: Tensor, segments: int) -> Tensor:
    """Segment index floor(u0 * K / 2^32) from word 0 of the position stream."""
    u0 = random_u32_indexed(s0, s1, torch.zeros_like(s0))
    return (u0 * segments) >> 32
