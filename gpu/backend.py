"""The one backend picker: which implementation (C, Triton, torch) runs for tensors on a device.

Both kernels of the package choose here: the decoder's evidence kernel (gpu/evidence.py) and the fused
generation step (gpu/step.py). CPU -> the compiled C extension (gpu/cpu_kernel.py) when it is built and has the
entry point the caller needs; CUDA -> Triton when it is importable; anything else, or neither, -> torch (the
readable fallback every other backend is tested against).
"""

from __future__ import annotations

import torch

BACKENDS = ("native", "triton", "torch")


def select_backend(device: torch.device | str, backend: str = "auto", native: str | None = None) -> str:
    """`backend` itself when named, else the fastest one for `device`. `native`: an entry point the C extension
    must have (an extension built from an older source may lack the newest one)."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be one of {('auto', *BACKENDS)}, got {backend!r}")
    if backend != "auto":
        return backend
    dev = torch.device(device)
    if dev.type == "cpu":
        from gpu import cpu_kernel

        if not cpu_kernel.available():
            return "torch"
        return "native" if native is None or hasattr(cpu_kernel.load(), native) else "torch"
    if dev.type == "cuda":
        from gpu import triton_kernels

        return "triton" if triton_kernels.triton is not None else "torch"
    return "torch"
