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


def routing_paths(tokens: Tensor, vocab_size: int, schedule: tuple[int, ...]) -> Tensor:
    """tokens [...] -> chunk-index paths [..., L]: routing chunks, then index in the final chunk."""
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
