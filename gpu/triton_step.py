"""The fused generation step as one Triton kernel (contract in gpu/step.py): one program per batch row.

Per row: pack the h-gram, check it against the row's context log and append it (on the device: no host
sync), position segment, payload values, one seed per level (`_level_seed`: the spec-version branch),
softmax statistics over the (interleaved) vocabulary, routing over chunk masses with Philox Gumbel noise,
Gumbel-max over the logits inside the chosen chunk. Unmarked rows take a Gumbel-max draw with noise from
a per-row random seed (drawn with the caller's generator on the device, no host round trip).
A later spec version adds its case in `_level_seed` (v4 and v5 take v3's). Spec v5 (position-multiplexed levels,
SPEC >= 5): no routing; the lane q = (word 0 of the position stream * 100) >> 32 and the slot's generated count
before the step (FRONT, FRONT_PUBLIC, PUBLIC) pick one level, its seed alone from segment 0's whole value, and a
Gumbel-max over the whole vocabulary (word j = token id j).

Float work is float64 (libdevice on CUDA, numpy under TRITON_INTERPRET=1); sums are block reductions,
so masses may differ from the C path's sequential sums in the last bits (a token changes only on an
exact near-tie of two chunk scores).
"""

from __future__ import annotations

import torch
from torch import Tensor

try:  # optional (CUDA machines, or the interpreter in tests)
    import triton
    import triton.language as tl

    from gpu.triton_prf import philox_word, sip_absorb, sip_finish, sip_init
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None

BLOCK = 1024
LOG_BLOCK = 64


def available() -> bool:
    return triton is not None


if triton is not None:

    @triton.jit
    def _ctx_word(ctx_ptr, i: tl.constexpr, H: tl.constexpr):
        """Message word i of the packed h-gram at ctx_ptr (uint64)."""
        m32 = 0xFFFFFFFF
        if i < H // 2:
            a = tl.load(ctx_ptr + 2 * i).to(tl.uint64, bitcast=True) & m32
            b = tl.load(ctx_ptr + 2 * i + 1).to(tl.uint64, bitcast=True) & m32
            w = a | (b << 32)
        else:
            w = tl.full([], ((4 * H) & 0xFF) << 56, tl.uint64)
            if H % 2 == 1:
                w = w | (tl.load(ctx_ptr + H - 1).to(tl.uint64, bitcast=True) & m32)
        return w

    @triton.jit
    def _sip_ctx(k0, k1, ctx_ptr, H: tl.constexpr):
        """SipHash-2-4-128 of the packed h-gram under (k0, k1)."""
        v0, v1, v2, v3 = sip_init(k0, k1)
        for i in tl.static_range(H // 2 + 1):
            v0, v1, v2, v3 = sip_absorb(v0, v1, v2, v3, _ctx_word(ctx_ptr, i, H))
        return sip_finish(v0, v1, v2, v3)

    @triton.jit
    def _level_seed(k0, k1, sk0, sk1, ctx_ptr, H: tl.constexpr, SPEC: tl.constexpr):
        """The spec-version branch of a level's seed: v1 and v2, SipHash of the h-gram under the entry key
        (k0, k1); v3, v4 and v5, SipHash under the level key (sk0, sk1), then the entry's value key XORed in."""
        tl.static_assert(SPEC == 1 or SPEC == 2 or SPEC == 3 or SPEC == 4 or SPEC == 5)
        if SPEC >= 3:  # v4 and v5 keep v3's construction
            a, b = _sip_ctx(sk0, sk1, ctx_ptr, H)
            return a ^ k0, b ^ k1
        else:
            return _sip_ctx(k0, k1, ctx_ptr, H)

    @triton.jit
    def _token_at(y, V, stride):
        """Token at routing position y (inverse interleave; stride 0 = identity)."""
        st = tl.maximum(stride, 1)
        a = V // st
        r = V - a * st
        head = y < r * (a + 1)
        yt = y - r * (a + 1)
        am = tl.maximum(a, 1)
        c = tl.where(head, y // (a + 1), r + yt // am)
        q = tl.where(head, y % (a + 1), yt % am)
        return tl.where(stride > 0, q * stride + c, y)

    @triton.jit
    def _gumbel(u):
        return -tl.log(-tl.log((u.to(tl.float64) + 0.5) * (1.0 / 4294967296.0)))

    @triton.jit(do_not_specialize=["segments", "stride", "cap", "front", "front_public", "public"])
    def _step_kernel(
        x_ptr, ctx_ptr, slot_ptr, pay_ptr, k0_ptr, k1_ptr, sk_ptr, sched_ptr, pos_ptr, gen_ptr, log_ptr, cnt_ptr,
        rnd_ptr, out_ptr, mark_ptr,
        V, C, K, segments, stride, cap, front, front_public, public,
        H: tl.constexpr, L: tl.constexpr, NW: tl.constexpr, SPEC: tl.constexpr, BLOCK: tl.constexpr,
        LOG_BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        slot = tl.load(slot_ptr + row)  # the request's state (payload, counter, context log)
        crow = ctx_ptr + row * H
        xrow = x_ptr + row * V
        # --- repeated-context check against the row's log, append when new --------------------------
        gen = tl.load(gen_ptr + slot)
        cnt = tl.load(cnt_ptr + slot)
        lrow = log_ptr + slot * cap * NW
        found = 0
        es = tl.arange(0, LOG_BLOCK)
        for e0 in range(0, cnt, LOG_BLOCK):
            e = e0 + es
            same = e < cnt
            for i in tl.static_range(NW):
                w = tl.load(lrow + e * NW + i, mask=e < cnt, other=0).to(tl.uint64, bitcast=True)
                same = same & (w == _ctx_word(crow, i, H))
            found = found | tl.max(same.to(tl.int32), axis=0)
        cont = gen >= H
        new = cont & (found == 0)
        for i in tl.static_range(NW):
            tl.store(lrow + cnt * NW + i, _ctx_word(crow, i, H).to(tl.int64, bitcast=True), mask=new & (cnt < cap))
        tl.store(cnt_ptr + slot, cnt + new.to(tl.int64))
        tl.store(gen_ptr + slot, gen + 1)
        if SPEC < 2:
            mark = (found == 0) | (gen < H)
        else:
            mark = new
        # --- softmax statistics (float64) -----------------------------------------------------------
        offs = tl.arange(0, BLOCK)
        mx = tl.full([], float("-inf"), tl.float64)
        for b0 in range(0, V, BLOCK):
            t = b0 + offs
            x = tl.load(xrow + t, mask=t < V, other=float("-inf")).to(tl.float64)
            mx = tl.maximum(mx, tl.max(x, axis=0))
        mx = tl.where(mx > float("-inf"), mx, 0.0)
        best_tok = tl.full([], 0, tl.int64)
        if mark:
            if SPEC >= 5:  # spec v5: one level per position, no routing, whole-vocabulary Gumbel-max
                z = tl.zeros([], tl.uint64)
                pk0 = tl.load(pos_ptr).to(tl.uint64, bitcast=True)
                pk1 = tl.load(pos_ptr + 1).to(tl.uint64, bitcast=True)
                ps0, ps1 = _sip_ctx(pk0, pk1, crow, H)
                lane = ((philox_word(ps0, ps1, z) * 100) >> 32).to(tl.int64)
                pct = tl.where(gen < front, front_public, public).to(tl.int64)
                deeper = 1 + tl.maximum(lane - pct, 0) * (L - 1) // tl.maximum(100 - pct, 1)
                lv = tl.where(lane < pct, 0, deeper)  # 0-based level (reference `v5_level` - 1)
                m = tl.load(pay_ptr + slot * K * L + lv)  # segment 0's entry: the whole values
                s0, s1 = _level_seed(tl.load(k0_ptr + lv * C + m).to(tl.uint64, bitcast=True),
                                     tl.load(k1_ptr + lv * C + m).to(tl.uint64, bitcast=True),
                                     tl.load(sk_ptr + 2 * lv).to(tl.uint64, bitcast=True),
                                     tl.load(sk_ptr + 2 * lv + 1).to(tl.uint64, bitcast=True), crow, H, SPEC)
                best = tl.full([], float("-inf"), tl.float64)
                for b0 in range(0, V, BLOCK):
                    t = b0 + offs
                    x = tl.load(xrow + t, mask=t < V, other=float("-inf")).to(tl.float64)
                    g = _gumbel(philox_word(s0, s1, t.to(tl.uint64)))
                    sc = tl.where(x > float("-inf"), (x - mx) + g, float("-inf"))
                    bm = tl.max(sc, axis=0)
                    better = bm > best
                    best = tl.where(better, bm, best)
                    best_tok = tl.where(better, b0 + tl.argmax(sc, axis=0), best_tok)
            else:  # spec v1-v4: one seed per level, routing over chunk masses, Gumbel-max in the chunk
                total = tl.zeros([], tl.float64)
                for b0 in range(0, V, BLOCK):
                    t = b0 + offs
                    x = tl.load(xrow + t, mask=t < V, other=float("-inf")).to(tl.float64)
                    total += tl.sum(tl.where(x > float("-inf"), tl.exp(x - mx), 0.0), axis=0)
                z = tl.zeros([], tl.uint64)
                pk0 = tl.load(pos_ptr).to(tl.uint64, bitcast=True)
                pk1 = tl.load(pos_ptr + 1).to(tl.uint64, bitcast=True)
                ps0, ps1 = _sip_ctx(pk0, pk1, crow, H)
                u0 = philox_word(ps0, ps1, z)
                seg = ((u0 * segments.to(tl.uint64)) >> 32).to(tl.int64)
                offset = tl.zeros([], tl.int64)
                size = tl.zeros([], tl.int64) + V
                for lv in tl.static_range(L):
                    m = tl.load(pay_ptr + (slot * K + seg) * L + lv)
                    s0, s1 = _level_seed(tl.load(k0_ptr + lv * C + m).to(tl.uint64, bitcast=True),
                                         tl.load(k1_ptr + lv * C + m).to(tl.uint64, bitcast=True),
                                         tl.load(sk_ptr + 2 * lv).to(tl.uint64, bitcast=True),
                                         tl.load(sk_ptr + 2 * lv + 1).to(tl.uint64, bitcast=True), crow, H, SPEC)
                    if lv < L - 1:  # routing level: Gumbel-max over chunk masses
                        k = tl.load(sched_ptr + lv)
                        a = size // k
                        small = k - (size - a * k)
                        best = tl.full([], float("-inf"), tl.float64)
                        best_i = tl.zeros([], tl.int64)
                        for i in range(0, k):
                            start = tl.where(i <= small, i * a, small * a + (i - small) * (a + 1))
                            ln = tl.where(i < small, a, a + 1)
                            mass = tl.zeros([], tl.float64)
                            for j0 in range(0, ln, BLOCK):
                                j = j0 + offs
                                tok = _token_at(offset + start + j, V, stride)
                                x = tl.load(xrow + tok, mask=j < ln, other=float("-inf")).to(tl.float64)
                                mass += tl.sum(tl.where(x > float("-inf"), tl.exp(x - mx), 0.0), axis=0)
                            g = _gumbel(philox_word(s0, s1, z + i))
                            sc = tl.where(mass > 0.0, tl.log(mass / total) + g, float("-inf"))
                            better = sc > best
                            best = tl.where(better, sc, best)
                            best_i = tl.where(better, i, best_i)
                        offset += tl.where(best_i <= small, best_i * a, small * a + (best_i - small) * (a + 1))
                        size = tl.where(best_i < small, a, a + 1)
                    else:  # last level: Gumbel-max over the logits inside the chunk
                        best = tl.full([], float("-inf"), tl.float64)
                        best_tok = _token_at(offset, V, stride)
                        for j0 in range(0, size, BLOCK):
                            j = j0 + offs
                            tok = _token_at(offset + j, V, stride)
                            x = tl.load(xrow + tok, mask=j < size, other=float("-inf")).to(tl.float64)
                            g = _gumbel(philox_word(s0, s1, j.to(tl.uint64)))
                            sc = tl.where(x > float("-inf"), (x - mx) + g, float("-inf"))
                            bm = tl.max(sc, axis=0)
                            bj = tl.argmax(sc, axis=0)
                            better = bm > best
                            best = tl.where(better, bm, best)
                            best_tok = tl.where(better, tl.sum(tl.where(offs == bj, tok, 0), axis=0), best_tok)
        else:  # unmarked: Gumbel-max with fresh noise (seed drawn on the device by the caller)
            r0 = tl.load(rnd_ptr + 2 * row).to(tl.uint64, bitcast=True)
            r1 = tl.load(rnd_ptr + 2 * row + 1).to(tl.uint64, bitcast=True)
            best = tl.full([], float("-inf"), tl.float64)
            for b0 in range(0, V, BLOCK):
                t = b0 + offs
                x = tl.load(xrow + t, mask=t < V, other=float("-inf")).to(tl.float64)
                g = _gumbel(philox_word(r0, r1, t.to(tl.uint64)))
                sc = tl.where(x > float("-inf"), x + g, float("-inf"))
                bm = tl.max(sc, axis=0)
                better = bm > best
                best = tl.where(better, bm, best)
                best_tok = tl.where(better, b0 + tl.argmax(sc, axis=0), best_tok)
        tl.store(out_ptr + row, best_tok)
        tl.store(mark_ptr + row, mark.to(tl.int64))


def fused_step(fs, logits: Tensor, contexts: Tensor, payload: Tensor, generated: Tensor, log, generator,
               slots: Tensor) -> tuple[Tensor, Tensor]:
    """Launch `_step_kernel` for `fs` (a gpu.step.FusedSampler); tensors stay on logits.device."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    s = fs.base
    b, v = logits.shape
    dev = logits.device
    x = logits if logits.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16) else logits.float()
    x = x.contiguous()
    ctx = contexts.to(dev, torch.int64).contiguous()
    pay = payload.to(dev, torch.int64).contiguous()
    front, front_public, public = fs.multiplex or (0, 0, 0)  # spec v5's; unused by v1-v4
    rnd = torch.randint(-(2**63), 2**63 - 1, (b, 2), dtype=torch.int64, device=dev, generator=generator)
    out = torch.empty(b, dtype=torch.int64, device=dev)
    marks = torch.empty(b, dtype=torch.int64, device=dev)
    _step_kernel[(b,)](
        x, ctx, slots.to(dev).contiguous(), pay, s.k0, s.k1, fs.seed_key_words,
        fs._schedule if s.schedule else fs._schedule.new_zeros(1),
        fs.position_words, generated,
        log.words, log.counts, rnd, out, marks, v, s.k0.shape[1], pay.shape[1], s.segments, s.stride, log.capacity,
        front, front_public, public,
        H=fs.h, L=s.levels, NW=fs.h // 2 + 1, SPEC=fs.spec_version, BLOCK=BLOCK, LOG_BLOCK=LOG_BLOCK,
    )
    return out, marks
