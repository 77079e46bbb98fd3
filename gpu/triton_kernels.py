"""CUDA path of the decoder evidence kernel, written in Triton (contract in gpu/scoring.py).

`_position_kernel` (one program per BLOCK scored tokens): SipHash-2-4-128 of each token's packed h-gram
under the position key and word 0 of its Philox4x32-10 stream -> segment. `_score_kernel` (one program
per (row, block of BLOCK_C candidates) of one table): walks the row's scored tokens in text order and,
per token, computes SipHash under every candidate key of the block (candidates across lanes), Philox
word s_l and -log(1 - U) in float64, added into the program's [window x cell, candidate] tile. Each
cell is a sequential sum in text order (no float atomics): deterministic, the reference's order.
Spec v3 tables (a level key): `_seed_kernel` computes each token's level seed once, and
`_score_seeded_kernel` draws one Philox block per candidate from (seed XOR value key).
SipHash and Philox are the Triton PRF's (gpu/triton_prf.py, shared with the fused step). Context masking,
windows, routing paths, message packing and spec v5's read filter reuse the torch code (gpu/scoring.py,
gpu/partition.py, gpu/prf.py).

Integer work is bit-exact; the evidence uses the device's float64 log (libdevice on CUDA, numpy under
TRITON_INTERPRET=1), which may differ from libm in the last bit for rare inputs.
Selected automatically for CUDA tensors when Triton is importable (gpu.backend.select_backend).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from gpu import prf, torch_kernel
from gpu.partition import routing_paths
from gpu.scoring import LevelKeys, ScoringSpec, empty_outputs, read_tokens, scored_tokens

try:  # Triton is optional (CUDA machines); the CPU install never needs it.
    import triton
    import triton.language as tl

    from gpu.triton_prf import philox_word, sip_absorb, sip_finish, sip_init
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

MAX_ACC_CELLS = 16384  # [window x cell, candidate] accumulator tile per program; larger rows use torch


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available() -> bool:
    """Triton importable and a CUDA device present (or the Triton CPU interpreter enabled)."""
    return triton is not None and (torch.cuda.is_available() or interpreted())


if triton is not None:

    @triton.jit
    def _siphash128(k0, k1, msg_ptr, base, mask, NW: tl.constexpr):
        """SipHash-2-4-128 under (k0, k1) of the NW packed words at msg_ptr + base (masked lanes read 0)."""
        v0, v1, v2, v3 = sip_init(k0, k1)
        for i in tl.static_range(NW):
            m = tl.load(msg_ptr + base + i, mask=mask, other=0).to(tl.uint64, bitcast=True)
            v0, v1, v2, v3 = sip_absorb(v0, v1, v2, v3, m)
        return sip_finish(v0, v1, v2, v3)

    # `segments` may be 1 (a per-value level), which Triton would otherwise specialize into a plain int.
    @triton.jit(do_not_specialize=["segments"])
    def _position_kernel(msg_ptr, pk0, pk1, seg_ptr, n_tokens, segments, NW: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_tokens
        zero = tl.zeros([BLOCK], dtype=tl.uint64)
        s0, s1 = _siphash128(zero + pk0.to(tl.uint64, bitcast=True), zero + pk1.to(tl.uint64, bitcast=True),
                             msg_ptr, offs * NW, mask, NW)
        u0 = philox_word(s0, s1, zero)
        tl.store(seg_ptr + offs, ((u0 * segments.to(tl.uint64)) >> 32).to(tl.int64), mask=mask)

    @triton.jit
    def _score_kernel(
        msg_ptr, j_ptr, cell_ptr, start_ptr, key0_ptr, key1_ptr, out_ptr, n_cand, n_cells,
        NW: tl.constexpr, RP: tl.constexpr, BLOCK_C: tl.constexpr,
    ):
        row = tl.program_id(0)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        cmask = cs < n_cand
        k0 = tl.load(key0_ptr + cs, mask=cmask, other=0).to(tl.uint64, bitcast=True)
        k1 = tl.load(key1_ptr + cs, mask=cmask, other=0).to(tl.uint64, bitcast=True)
        zero = tl.zeros([BLOCK_C], dtype=tl.uint64)
        izero = tl.zeros([BLOCK_C], dtype=tl.int64)  # message offsets stay signed, as pointer offsets
        rs = tl.arange(0, RP)
        acc = tl.zeros([RP, BLOCK_C], dtype=tl.float64)
        start = tl.load(start_ptr + row)
        end = tl.load(start_ptr + row + 1)
        for n in range(start, end):
            s0, s1 = _siphash128(k0, k1, msg_ptr, izero + n * NW, cmask, NW)
            j = tl.load(j_ptr + n).to(tl.uint64, bitcast=True)
            u = philox_word(s0, s1, zero + j)
            ev = -tl.log((4294967295.5 - u.to(tl.float64)) / 4294967296.0)
            cell = tl.load(cell_ptr + n)
            # x + 0.0 == x exactly: each cell is a sequential sum in text order
            acc += tl.where((rs == cell)[:, None], ev[None, :], 0.0)
        dst = out_ptr + (row * n_cells + rs)[:, None] * n_cand + cs[None, :]
        tl.store(dst, acc, mask=(rs < n_cells)[:, None] & cmask[None, :])

    @triton.jit
    def _seed_kernel(msg_ptr, lk0, lk1, s0_ptr, s1_ptr, n_tokens, NW: tl.constexpr, BLOCK: tl.constexpr):
        """Spec v3: each token's level seed SipHash-2-4-128(level key, context)."""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_tokens
        zero = tl.zeros([BLOCK], dtype=tl.uint64)
        s0, s1 = _siphash128(zero + lk0.to(tl.uint64, bitcast=True), zero + lk1.to(tl.uint64, bitcast=True),
                             msg_ptr, offs * NW, mask, NW)
        tl.store(s0_ptr + offs, s0.to(tl.int64, bitcast=True), mask=mask)
        tl.store(s1_ptr + offs, s1.to(tl.int64, bitcast=True), mask=mask)

    @triton.jit
    def _score_seeded_kernel(
        s0_ptr, s1_ptr, j_ptr, cell_ptr, start_ptr, key0_ptr, key1_ptr, out_ptr, n_cand, n_cells,
        RP: tl.constexpr, BLOCK_C: tl.constexpr,
    ):
        """Spec v3 `_score_kernel`: per token and candidate one Philox block of (level seed ^ value key)."""
        row = tl.program_id(0)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        cmask = cs < n_cand
        k0 = tl.load(key0_ptr + cs, mask=cmask, other=0).to(tl.uint64, bitcast=True)
        k1 = tl.load(key1_ptr + cs, mask=cmask, other=0).to(tl.uint64, bitcast=True)
        zero = tl.zeros([BLOCK_C], dtype=tl.uint64)
        rs = tl.arange(0, RP)
        acc = tl.zeros([RP, BLOCK_C], dtype=tl.float64)
        start = tl.load(start_ptr + row)
        end = tl.load(start_ptr + row + 1)
        for n in range(start, end):
            s0 = tl.load(s0_ptr + n).to(tl.uint64, bitcast=True)
            s1 = tl.load(s1_ptr + n).to(tl.uint64, bitcast=True)
            j = tl.load(j_ptr + n).to(tl.uint64, bitcast=True)
            u = philox_word(k0 ^ s0, k1 ^ s1, zero + j)
            ev = -tl.log((4294967295.5 - u.to(tl.float64)) / 4294967296.0)
            cell = tl.load(cell_ptr + n)
            acc += tl.where((rs == cell)[:, None], ev[None, :], 0.0)
        dst = out_ptr + (row * n_cells + rs)[:, None] * n_cand + cs[None, :]
        tl.store(dst, acc, mask=(rs < n_cells)[:, None] & cmask[None, :])


def _blocks(rows: int, candidates: int) -> tuple[int, int] | None:
    """(RP, BLOCK_C) tile of one program, or None when the window x cell rows do not fit one tile."""
    rp = triton.next_power_of_2(max(rows, 1))
    if rp > MAX_ACC_CELLS // 4:
        return None
    return rp, max(1, min(triton.next_power_of_2(max(candidates, 1)), 128, MAX_ACC_CELLS // rp))


def segment_scores(
    ids: Tensor,
    lengths: Tensor,
    spec: ScoringSpec,
    position_key: tuple[Tensor, Tensor],
    tables: list[LevelKeys],
    block: int = 128,
) -> tuple[list[Tensor], Tensor]:
    """Same contract as gpu.torch_kernel.segment_scores; tensors stay on ids.device."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    if any(_blocks(spec.windows * t.cells(spec), t.candidates) is None for t in tables):
        return torch_kernel.segment_scores(ids, lengths, spec, position_key, tables)
    device = ids.device
    b = ids.shape[0]
    scores, counts = empty_outputs(b, spec, tables, device)
    st = scored_tokens(ids, lengths, spec.context_width, spec.windows)
    n = int(st.row.numel())
    if n == 0:
        return scores, counts
    msg = torch.stack(prf.context_words(st.context), dim=1).contiguous()  # [N, NW] int64
    nw = msg.shape[1]
    seg = torch.empty(n, dtype=torch.int64, device=device)
    pk0, pk1 = (prf.s64(int(x)) for x in position_key)
    _position_kernel[(triton.cdiv(n, block),)](msg, pk0, pk1, seg, n, spec.segments, NW=nw, BLOCK=block)
    if spec.read is not None:  # spec v5: only the positions the level reads (windows among those)
        keep = spec.read.keep(st.position, seg)
        st, seg = read_tokens(st, seg, spec, b)
        msg = msg[keep].contiguous()
        n = int(st.row.numel())
        if n == 0:
            return scores, counts
    rw = st.row * spec.windows + st.window
    counts = torch.bincount(rw * spec.segments + seg, minlength=b * spec.windows * spec.segments)
    counts = counts.view(b, spec.windows, spec.segments)
    path = routing_paths(st.token, spec.vocab_size, spec.schedule, spec.stride)  # [N, L]
    start = torch.zeros(b + 1, dtype=torch.int64, device=device)
    start[1:] = torch.cumsum(torch.bincount(st.row, minlength=b), 0)
    for table, out in zip(tables, scores, strict=True):
        cells = table.cells(spec)
        rp, bc = _blocks(spec.windows * cells, table.candidates)  # type: ignore[misc]
        cell = (st.window * cells + (0 if table.per_value else seg)).contiguous()
        j = path[:, table.level - 1].contiguous()
        key0 = table.k0.to(device, torch.int64).contiguous()
        key1 = table.k1.to(device, torch.int64).contiguous()
        grid = (b, triton.cdiv(table.candidates, bc))
        if table.seed_key is not None:  # spec v3: one level seed per token, then Philox per candidate
            s0, s1 = _level_seeds(msg, table, n, nw, block)
            _score_seeded_kernel[grid](s0, s1, j, cell, start, key0, key1, out, table.candidates,
                                       spec.windows * cells, RP=rp, BLOCK_C=bc)
            continue
        _score_kernel[grid](msg, j, cell, start, key0, key1, out, table.candidates, spec.windows * cells,
                            NW=nw, RP=rp, BLOCK_C=bc)
    return scores, counts


def _level_seeds(msg: Tensor, table: LevelKeys, n: int, nw: int, block: int) -> tuple[Tensor, Tensor]:
    """Spec v3 level seeds [N] (int64 bit patterns) of every scored token under the table's level key."""
    assert table.seed_key is not None
    s0 = torch.empty(n, dtype=torch.int64, device=msg.device)
    s1 = torch.empty(n, dtype=torch.int64, device=msg.device)
    lk0, lk1 = (prf.s64(int(x.reshape(-1)[0])) for x in table.seed_key)
    _seed_kernel[(triton.cdiv(n, block),)](msg, lk0, lk1, s0, s1, n, NW=nw, BLOCK=block)
    return s0, s1
