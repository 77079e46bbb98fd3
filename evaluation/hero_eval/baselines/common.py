"""Keyed integer hashing in torch (vectorised over batch x vocabulary) and shared baseline plumbing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

M32 = 0xFFFFFFFF


def key_int(key: bytes, label: str) -> int:
    """A 31-bit integer derived from a secret key and a label (domain separation)."""
    return int.from_bytes(hashlib.sha256(key + label.encode()).digest()[:4], "big") & 0x7FFFFFFF


def mix32(x: Tensor) -> Tensor:
    """murmur3 fmix32 on int64 tensors holding 32-bit values (products wrap, low 32 bits are exact)."""
    x = x & M32
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & M32
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & M32
    return x ^ (x >> 16)


def hash2(a: Tensor | int, b: Tensor | int) -> Tensor:
    """Keyed pair hash: mix32(mix32(a) * golden ^ b) (broadcasting)."""
    a = torch.as_tensor(a, dtype=torch.int64)
    b = torch.as_tensor(b, dtype=torch.int64)
    return mix32(((mix32(a) * 0x9E3779B1) & M32) ^ (b & M32))


@dataclass
class BaselineDecode:
    """Per text: decoded bits (None where the position got no token), and a detection score."""

    bits: list[list[int | None]]
    score: list[float]


def pad_ids(batch: list[list[int]]) -> tuple[Tensor, Tensor]:
    lengths = torch.tensor([len(x) for x in batch], dtype=torch.int64)
    width = max(1, int(lengths.max()) if batch else 1)
    ids = torch.zeros(len(batch), width, dtype=torch.int64)
    for i, row in enumerate(batch):
        if row:
            ids[i, : len(row)] = torch.as_tensor(row, dtype=torch.int64)
    return ids, lengths
