"""CUDA path of the decoder evidence kernel, written in Triton.

Stage 1 (`_evidence_kernel`, one program per BLOCK scored tokens): SipHash-2-4-128 of each token's
packed h-gram under the position key and under every candidate key of every requested level,
Philox4x32-10 word s_l, and -log(1 - U) in float64. Stage 2 (`_accumulate_kernel`, one program per
row) adds each row's evidence into its [K, C] cells sequentially in token order, so the sums are
deterministic (no float atomics) and follow the reference's order. Context masking, routing paths
and message packing reuse the torch code (gpu/evidence.py, gpu/partition.py, gpu/prf.py).

Integer work is bit-exact; the evidence uses the device's float64 log (libdevice on CUDA, numpy under
TRITON_INTERPRET=1), which may differ from libm in the last bit for rare inputs.
Selected automatically for CUDA tensors when Triton is importable (gpu.evidence.select_backend).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from gpu import prf
from gpu.partition import routing_paths

try:  # Triton is optional (CUDA machines); the CPU install never needs it.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

MAX_ACC_CELLS = 16384  # [K, C] accumulator cells per program; larger decodes use the torch path


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available() -> bool:
    """Triton importable and a CUDA device present (or the Triton CPU interpreter enabled)."""
    return triton is not None and (torch.cuda.is_available() or interpreted())


if triton is not None:

    @triton.jit
    def _rotl(x, b: tl.constexpr):
        return (x << b) | (x >> (64 - b))

    @triton.jit
    def _sipround(v0, v1, v2, v3):
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

    @triton.jit
    def _siphash128(k0, k1, msg_ptr, offs, mask, NW: tl.constexpr):
        v0 = k0 ^ 0x736F6D6570736575
        v1 = k1 ^ (0x646F72616E646F6D ^ 0xEE)
        v2 = k0 ^ 0x6C7967656E657261
        v3 = k1 ^ 0x7465646279746573
        for i in tl.static_range(NW):
            m = tl.load(msg_ptr + offs * NW + i, mask=mask, other=0).to(tl.uint64, bitcast=True)
            v3 = v3 ^ m
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0 = v0 ^ m
        v2 = v2 ^ 0xEE
        for _ in tl.static_range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        lo = v0 ^ v1 ^ v2 ^ v3
        v1 = v1 ^ 0xDD
        for _ in tl.static_range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        return lo, v0 ^ v1 ^ v2 ^ v3

    @triton.jit
    def _philox_word(s0, s1, j):
        """Lane j%4 of Philox4x32-10 block (j//4, 0, s1.lo, s1.hi) keyed by (s0.lo, s0.hi); uint64 lanes."""
        m32 = 0xFFFFFFFF
        blk = j >> 2
        c0 = blk & m32
        c1 = blk >> 32
        c2 = s1 & m32
        c3 = s1 >> 32
        k0 = s0 & m32
        k1 = s0 >> 32
        for _ in tl.static_range(10):
            p0 = c0 * 0xD2511F53
            p1 = c2 * 0xCD9E8D57
            n0 = (p1 >> 32) ^ c1 ^ k0
            n2 = (p0 >> 32) ^ c3 ^ k1
            c1 = p1 & m32
            c3 = p0 & m32
            c0 = n0
            c2 = n2
            k0 = (k0 + 0x9E3779B9) & m32
            k1 = (k1 + 0xBB67AE85) & m32
        lane = j & 3
        return tl.where(lane == 0, c0, tl.where(lane == 1, c1, tl.where(lane == 2, c2, c3)))

    @triton.jit
    def _evidence_kernel(
        msg_ptr, path_ptr, key0_ptr, key1_ptr, lvl_ptr, pk0, pk1, seg_ptr, ev_ptr, n_tokens, segments,
        NW: tl.constexpr, L: tl.constexpr, CTOT: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_tokens
        zero = tl.zeros([BLOCK], dtype=tl.uint64)
        p0 = zero + pk0.to(tl.uint64, bitcast=True)
        p1 = zero + pk1.to(tl.uint64, bitcast=True)
        s0, s1 = _siphash128(p0, p1, msg_ptr, offs, mask, NW)
        u0 = _philox_word(s0, s1, zero)
        seg = (u0 * segments.to(tl.uint64)) >> 32
        tl.store(seg_ptr + offs, seg.to(tl.int64), mask=mask)
        for c in tl.static_range(CTOT):
            k0 = zero + tl.load(key0_ptr + c).to(tl.uint64, bitcast=True)
            k1 = zero + tl.load(key1_ptr + c).to(tl.uint64, bitcast=True)
            lv = tl.load(lvl_ptr + c)
            j = tl.load(path_ptr + offs * L + lv, mask=mask, other=0).to(tl.uint64, bitcast=True)
            s0, s1 = _siphash128(k0, k1, msg_ptr, offs, mask, NW)
            u = _philox_word(s0, s1, j)
            ev = -tl.log((4294967295.5 - u.to(tl.float64)) / 4294967296.0)
            tl.store(ev_ptr + offs * CTOT + c, ev, mask=mask)

    @triton.jit
    def _accumulate_kernel(
        seg_ptr, ev_ptr, start_ptr, out_ptr, segments,
        CTOT: tl.constexpr, KP: tl.constexpr, CP: tl.constexpr,
    ):
        row = tl.program_id(0)
        start = tl.load(start_ptr + row)
        end = tl.load(start_ptr + row + 1)
        ks = tl.arange(0, KP)
        cs = tl.arange(0, CP)
        acc = tl.zeros([KP, CP], dtype=tl.float64)
        for n in range(start, end):
            k = tl.load(seg_ptr + n)
            ev = tl.load(ev_ptr + n * CTOT + cs, mask=cs < CTOT, other=0.0)
            # x + 0.0 == x exactly: each cell is a sequential sum in token order
            acc += tl.where((ks == k)[:, None], ev[None, :], 0.0)
        cell = (row * segments + ks)[:, None] * CTOT + cs[None, :]
        tl.store(out_ptr + cell, acc, mask=(ks < segments)[:, None] & (cs < CTOT)[None, :])


def segment_scores(
    ids: Tensor,
    lengths: Tensor,
    *,
    context_width: int,
    vocab_size: int,
    schedule: tuple[int, ...],
    segments: int,
    position_key: tuple[Tensor, Tensor],
    tables: list,
    block: int = 128,
    stride: int = 0,
) -> tuple[list[Tensor], Tensor]:
    """Same contract as gpu.evidence.segment_scores_torch; tensors stay on ids.device."""
    from gpu.evidence import scored_tokens, segment_scores_torch

    if triton is None:
        raise RuntimeError("Triton is not installed")
    kwargs = dict(
        context_width=context_width, vocab_size=vocab_size, schedule=tuple(schedule), segments=segments,
        position_key=position_key, tables=tables, stride=stride,
    )
    device = ids.device
    b = ids.shape[0]
    sizes = [int(t.k0.shape[0]) for t in tables]
    ctot = sum(sizes)
    kp, cp = triton.next_power_of_2(max(segments, 1)), triton.next_power_of_2(max(ctot, 1))
    if kp * cp > MAX_ACC_CELLS or ctot == 0:
        return segment_scores_torch(ids, lengths, **kwargs)
    st = scored_tokens(ids, lengths, context_width)
    n = int(st.row.numel())
    out = torch.zeros(b, segments, ctot, dtype=torch.float64, device=device)
    counts = torch.zeros(b, segments, dtype=torch.int64, device=device)
    if n:
        msg = torch.stack(prf.context_words(st.context), dim=1).contiguous()  # [N, NW] int64
        path = routing_paths(st.token, vocab_size, tuple(schedule), stride).contiguous()  # [N, L]
        key0 = torch.cat([t.k0.to(device, torch.int64) for t in tables]).contiguous()
        key1 = torch.cat([t.k1.to(device, torch.int64) for t in tables]).contiguous()
        lvl = torch.tensor([t.level - 1 for t, c in zip(tables, sizes, strict=True) for _ in range(c)],
                           dtype=torch.int64, device=device)
        seg = torch.empty(n, dtype=torch.int64, device=device)
        ev = torch.empty(n, ctot, dtype=torch.float64, device=device)
        pk0, pk1 = (int(x) for x in position_key)
        _evidence_kernel[(triton.cdiv(n, block),)](
            msg, path, key0, key1, lvl, pk0, pk1, seg, ev, n, segments,
            NW=msg.shape[1], L=path.shape[1], CTOT=ctot, BLOCK=block,
        )
        start = torch.zeros(b + 1, dtype=torch.int64, device=device)
        start[1:] = torch.cumsum(torch.bincount(st.row, minlength=b), 0)
        _accumulate_kernel[(b,)](seg, ev, start, out, segments, CTOT=ctot, KP=kp, CP=cp)
        counts = torch.bincount(st.row * segments + seg, minlength=b * segments).view(b, segments)
    res, off = [], 0
    for c in sizes:
        res.append(out[:, :, off : off + c].contiguous())
        off += c
    return res, counts
