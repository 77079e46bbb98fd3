"""Decoder evidence kernel: picks the backend for the tensors' device (contract in gpu/scoring.py).

CPU -> the compiled C kernel (gpu/cpu_kernel.py) when it is available; CUDA -> the Triton kernel
(gpu/triton_kernels.py) when Triton is installed; otherwise the pure-torch kernel (gpu/torch_kernel.py).
Returns scores [B, W, cells, C] float64 per table (cells = segments, or 1 for per-value tables) and
token counts [B, W, segments] int64, on ids.device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gpu import cpu_kernel, torch_kernel, triton_kernels
from gpu.scoring import LevelKeys, ScoringSpec

BACKENDS = ("auto", "torch", "native", "triton")


def select_backend(device: torch.device | str, backend: str = "auto") -> str:
    """The implementation `segment_scores` uses for tensors on `device`."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    dev = torch.device(device)
    if dev.type == "cpu":
        return "native" if cpu_kernel.available() else "torch"
    if dev.type == "cuda":
        return "triton" if triton_kernels.available() else "torch"
    return "torch"


def segment_scores(
    ids: Tensor,
    lengths: Tensor,
    spec: ScoringSpec,
    position_key: tuple[Tensor, Tensor],
    tables: list[LevelKeys],
    backend: str = "auto",
) -> tuple[list[Tensor], Tensor]:
    """Per-(row, window, cell) evidence for every table; see gpu/scoring.py."""
    impl = select_backend(ids.device, backend)
    if impl == "native":
        scores, counts = cpu_kernel.segment_scores(ids, lengths, spec, position_key, tables)
        if ids.device.type != "cpu":
            return [s.to(ids.device) for s in scores], counts.to(ids.device)
        return scores, counts
    if impl == "triton":
        return triton_kernels.segment_scores(ids, lengths, spec, position_key, tables)
    return torch_kernel.segment_scores(ids, lengths, spec, position_key, tables)
