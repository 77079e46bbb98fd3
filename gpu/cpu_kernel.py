"""CPU fast path of the decoder evidence kernel: the C extension `gpu._hero_kernels`.

Same contract as `gpu.torch_kernel.segment_scores` (gpu/scoring.py) and bit-identical to the pure-Python
reference (integer PRF work is exact; the evidence uses libm `log` like CPython's `math.log`; every cell
is summed in text order). The scoring work is split over `threads` OS threads inside C.

The extension is normally built by `pip install -e .` (setup.py). When it is missing (installed
without a compiler, or an editable install that predates setup.py), the first call tries once to
build it with the system C compiler into a per-user cache (set HERO_NATIVE_BUILD=0 to forbid that);
when that fails too, `available()` is False and callers use the torch path.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import math
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

from gpu.scoring import LevelKeys, ScoringSpec

SOURCE = Path(__file__).parent / "_native" / "hero_kernels.c"
ABI = 10  # must match PyModule_AddIntConstant(m, "ABI", ...) in the C source
_MODULE: ModuleType | None = None
_TRIED = False
_ERROR: str | None = None


def _cache_dir() -> Path:
    base = os.environ.get("HERO_NATIVE_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "hero-verifier" / "native"


def _source_sha() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def _build_in_cache() -> ModuleType:
    """Compile the extension with the interpreter's C compiler into the cache (keyed by source hash)."""
    src = SOURCE.read_bytes()
    tag = hashlib.sha256(src + sys.version.encode()).hexdigest()[:16]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = _cache_dir() / f"_hero_kernels_{tag}{suffix}"
    if not target.exists():
        if sys.platform == "win32":
            raise RuntimeError("no automatic build on Windows; run `pip install -e .` with MSVC")
        cc = (sysconfig.get_config_var("CC") or "cc").split()
        include = sysconfig.get_paths()["include"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / target.name
            sha = f'-DHERO_SOURCE_SHA="{hashlib.sha256(src).hexdigest()}"'
            cmd = [*cc, "-O3", "-std=c99", "-fPIC", "-shared", "-pthread", sha, f"-I{include}", str(SOURCE), "-o",
                   str(out)]
            if sys.platform == "darwin":
                cmd += ["-undefined", "dynamic_lookup"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"C compiler failed: {proc.stderr.strip()[:500]}")
            os.replace(out, target)  # atomic: a concurrent builder never sees a half-written file
    spec = importlib.util.spec_from_file_location("gpu._hero_kernels", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if getattr(module, "ABI", 0) != ABI:
        raise RuntimeError(f"built module has ABI {getattr(module, 'ABI', 0)}, expected {ABI}")
    return module


def load() -> ModuleType | None:
    """The compiled module, or None (reason in `error()`). Tried once per process."""
    global _MODULE, _TRIED, _ERROR
    if _TRIED:
        return _MODULE
    _TRIED = True
    if os.environ.get("HERO_NATIVE", "1") == "0":
        _ERROR = "disabled by HERO_NATIVE=0"
        return None
    try:
        from gpu import _hero_kernels  # type: ignore[attr-defined]

        # beside its source (a checkout), the build must be of that very source; an installed wheel has none
        fresh = not SOURCE.exists() or getattr(_hero_kernels, "SOURCE_SHA", None) == _source_sha()
        if getattr(_hero_kernels, "ABI", 0) == ABI and fresh:
            _MODULE = _hero_kernels
            return _MODULE
        _ERROR = "gpu._hero_kernels is stale (built from an older source; reinstall with pip install -e .)"
    except ImportError as exc:
        _ERROR = f"gpu._hero_kernels not built ({exc})"
    if os.environ.get("HERO_NATIVE_BUILD", "1") != "0" and SOURCE.exists():
        try:
            _MODULE = _build_in_cache()
            _ERROR = None
        except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as exc:
            _ERROR = f"{_ERROR}; automatic build failed: {exc}"
    return _MODULE


def available() -> bool:
    return load() is not None


def error() -> str | None:
    load()
    return _ERROR


def default_threads() -> int:
    return max(1, torch.get_num_threads())


def _required() -> ModuleType:
    """The compiled kernel, or one error naming why it is unavailable (callers chose the C backend)."""
    mod = load()
    if mod is None:
        raise RuntimeError(f"CPU fast path unavailable: {_ERROR}")
    return mod


def _cpu_batch(ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """A right-padded batch as the C kernels read it: contiguous int64 CPU tensors."""
    return (ids.detach().to("cpu", torch.int64).contiguous(), lengths.detach().to("cpu", torch.int64).contiguous())


def _i64(values) -> np.ndarray:
    return np.array(list(values), dtype=np.int64)


def segment_scores(
    ids: Tensor,
    lengths: Tensor,
    spec: ScoringSpec,
    position_key: tuple[Tensor, Tensor],
    tables: list[LevelKeys],
    threads: int | None = None,
) -> tuple[list[Tensor], Tensor]:
    """CPU tensors in, CPU tensors out (shapes in gpu/scoring.py)."""
    mod = _required()
    ids, lengths = _cpu_batch(ids, lengths)
    b, t = ids.shape
    if tables:
        k0 = torch.cat([tb.k0.detach().to("cpu", torch.int64) for tb in tables]).contiguous()
        k1 = torch.cat([tb.k1.detach().to("cpu", torch.int64) for tb in tables]).contiguous()
    else:
        k0 = k1 = torch.zeros(0, dtype=torch.int64)
    shapes = [(b, spec.windows, tb.cells(spec), tb.candidates) for tb in tables]
    out = torch.zeros(sum(math.prod(s) for s in shapes), dtype=torch.float64)
    counts = torch.zeros(b, spec.windows, spec.segments, dtype=torch.int64)
    mask = (1 << 64) - 1
    mod.segment_scores(
        ids.numpy(),
        lengths.numpy(),
        b,
        t,
        spec.context_width,
        spec.vocab_size,
        _i64(spec.schedule),
        spec.segments,
        spec.windows,
        int(position_key[0]) & mask,
        int(position_key[1]) & mask,
        _i64(tb.level for tb in tables),
        _i64(tb.candidates for tb in tables),
        _i64(int(tb.per_value) for tb in tables),
        k0.numpy(),
        k1.numpy(),
        out.numpy(),
        counts.numpy(),
        default_threads() if threads is None else int(threads),
        spec.stride,
        _i64(int(tb.seed_key is not None) for tb in tables),
        _i64(0 if tb.seed_key is None else int(tb.seed_key[0].reshape(-1)[0]) for tb in tables),
        _i64(0 if tb.seed_key is None else int(tb.seed_key[1].reshape(-1)[0]) for tb in tables),
        _i64(() if spec.read is None else spec.read.words()),
    )
    res, off = [], 0
    for s in shapes:
        n = math.prod(s)
        res.append(out[off : off + n].view(s))
        off += n
    return res, counts


def scored_positions(ids: Tensor, lengths: Tensor, h: int, position_key: tuple[Tensor, Tensor],
                     segments: int) -> tuple[Tensor, Tensor, Tensor]:
    """The scored positions of a right-padded batch (gpu/scoring.py's rule) as row, text index and position
    segment ([N] int64 each, rows in order, positions in text order; spec v5's lane with 100 segments)."""
    mod = _required()
    ids, lengths = _cpu_batch(ids, lengths)
    b, t = ids.shape
    m = b * max(t - h, 0)
    row, pos, seg = (torch.empty(m, dtype=torch.int64) for _ in range(3))
    mask = (1 << 64) - 1
    n = mod.scored_positions(ids.numpy(), lengths.numpy(), b, t, h, int(position_key[0]) & mask,
                             int(position_key[1]) & mask, segments, row.numpy(), pos.numpy(), seg.numpy())
    return row[:n], pos[:n], seg[:n]


def prf_seed(k0: Tensor, k1: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row seeds: keys k0/k1 [N] (or scalars), contexts [N, h] (CPU) -> (s0, s1) int64 [N]."""
    mod = _required()
    ctx = context.detach().to(torch.int64).contiguous()
    n, h = ctx.shape
    k0 = k0.detach().to(torch.int64).expand(n).contiguous()
    k1 = k1.detach().to(torch.int64).expand(n).contiguous()
    s0 = torch.empty(n, dtype=torch.int64)
    s1 = torch.empty(n, dtype=torch.int64)
    mod.prf_seeds(k0.numpy(), k1.numpy(), ctx.numpy(), n, h, s0.numpy(), s1.numpy())
    return s0, s1


def random_u32_stream(s0: Tensor, s1: Tensor, n: int) -> Tensor:
    """Words 0..n-1 of each seed's stream: seeds [N] -> [N, n] int64 (as gpu.prf.random_u32_stream)."""
    mod = _required()
    s0 = s0.detach().to(torch.int64).contiguous()
    s1 = s1.detach().to(torch.int64).contiguous()
    out = torch.empty(s0.shape[0], n, dtype=torch.int64)
    mod.philox_stream(s0.numpy(), s1.numpy(), s0.shape[0], n, out.numpy())
    return out
