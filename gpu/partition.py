"""Vectorised contiguous partition of a vocabulary range into K chunks whose sizes differ by <= 1.

size = a*K + r: the first K - r chunks have a items, the last r have a + 1 (spec section 6).
"""

from __future__ import annotations

import torch
from torch import Tensor


def chunk_start(size: Tensor, k: int, i: Tensor) -> Tensor:
    """Start offset (relative) of chunk i; i may equal k to get the end of the range."""
    a = size // k
    small = k - size % k
    return torch.where(i <= small, i * a, small * a + (i - small) * (a + 1))


def chunk_of(size: Tensor, k: int, x: Tensor) -> Tensor:
    """Chunk index of relative item x in a range of `size` items."""
    a = size // k
    small = k - size % k
    boundary = small * a
    in_small = (a > 0) & (x < boundary)
    return torch.where(in_small, x // a.clamp(min=1), small + (x - boundary) // (a + 1))


def interleave(x: Tensor, vocab_size: int, stride: int) -> Tensor:
    """Routing position of tokens under the interleaved layout (spec section 6); stride 0 = identity."""
    if not stride:
        return x
    a, r = divmod(vocab_size, stride)
    c, q = x % stride, x // stride
    return c * a + torch.clamp(c, max=r) + q


def deinterleave(y: Tensor, vocab_size: int, stride: int) -> Tensor:
    """Token at routing position y (inverse of `interleave`)."""
    if not stride:
        return y
    a, r = divmod(vocab_size, stride)
    head = y < r * (a + 1)
    yt = y - r * (a + 1)
    c = torch.where(head, y // (a + 1), r + yt // max(a, 1))
    q = torch.where(head, y % (a + 1), yt % max(a, 1))
    return q * stride + c


def routing_paths(tokens: Tensor, vocab_size: int, schedule: tuple[int, ...], stride: int = 0) -> Tensor:
    """tokens [...] -> chunk-index paths [..., L]: routing chunks, then index in the final chunk."""
    tokens = interleave(tokens, vocab_size, stride)
    offset = torch.zeros_like(tokens)
    size = torch.full_like(tokens, vocab_size)
    path = []
    for k in schedule:
        i = chunk_of(size, k, tokens - offset)
        start = chunk_start(size, k, i)
        end = chunk_start(size, k, i + 1)
        path.append(i)
        offset = offset + start
        size = end - start
    path.append(tokens - offset)
    return torch.stack(path, dim=-1)
