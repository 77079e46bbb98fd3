"""Decoder evidence kernel on the backend gpu/backend.py picks for the tensors' device (contract in gpu/scoring.py).

CPU -> the compiled C kernel (gpu/cpu_kernel.py) when it is available; CUDA -> the Triton kernel
(gpu/triton_kernels.py) when Triton is installed; otherwise the pure-torch kernel (gpu/torch_kernel.py).
Returns scores [B, W, cells, C] float64 per table (cells = segments, or 1 for per-value tables) and
token counts [B, W, segments] int64, on ids.device.
"""

from __future__ import annotations

from torch import Tensor

from gpu import cpu_kernel, torch_kernel
from gpu.backend import select_backend
from gpu.scoring import LevelKeys, ScoringSpec

__all__ = ["segment_scores", "select_backend"]


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
    if impl == "triton":  # imported here: a CPU-only process never loads Triton (its exit noise, its import time)
        from gpu import triton_kernels

        return triton_kernels.segment_scores(ids, lengths, spec, position_key, tables)
    return torch_kernel.segment_scores(ids, lengths, spec, position_key, tables)
