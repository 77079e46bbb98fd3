"""The PRF of every Triton kernel, in one home: SipHash-2-4-128 and one Philox4x32-10 word (gpu/prf.py's
definitions, bit for bit), as @triton.jit functions that the evidence kernels (gpu/triton_kernels.py) and the
fused step (gpu/triton_step.py) call. Triton inlines a jit function called from another module, so a kernel
pays nothing for the import.

SipHash is split where the callers differ: `sip_init` (the 128-bit variant's key setup), `sip_absorb` (one
64-bit message word, two compression rounds) and `sip_finish` (four finalization rounds per 64-bit half).
Each caller feeds the words of its own message layout (a packed word array, or an h-gram packed on the fly).
"""

from __future__ import annotations

try:  # optional (CUDA machines, or the interpreter in tests)
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None


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
    def sip_init(k0, k1):
        """SipHash-2-4-128's state under the key (k0, k1) (uint64)."""
        v0 = k0 ^ 0x736F6D6570736575
        v1 = k1 ^ (0x646F72616E646F6D ^ 0xEE)
        v2 = k0 ^ 0x6C7967656E657261
        v3 = k1 ^ 0x7465646279746573
        return v0, v1, v2, v3

    @triton.jit
    def sip_absorb(v0, v1, v2, v3, m):
        """One message word m (uint64) into the state: c = 2 compression rounds."""
        v3 = v3 ^ m
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 = v0 ^ m
        return v0, v1, v2, v3

    @triton.jit
    def sip_finish(v0, v1, v2, v3):
        """The 128-bit digest (low, high word) after the last word: d = 4 rounds per half."""
        v2 = v2 ^ 0xEE
        for _ in tl.static_range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        lo = v0 ^ v1 ^ v2 ^ v3
        v1 = v1 ^ 0xDD
        for _ in tl.static_range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        return lo, v0 ^ v1 ^ v2 ^ v3

    @triton.jit
    def philox_word(s0, s1, j):
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
