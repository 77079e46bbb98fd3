"""Pure-Python reference of the frozen HeRo randomness, spec v1-v5 (docs/spec.md).

Slow on purpose and written to be read next to the spec: every fast path (torch, compiled CPU, CUDA)
is tested for bit equality against these functions.  Nothing here imports torch or numpy.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1

# --- SipHash-2-4 with 128-bit output ----------------------------------------------------------


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK64


def _sipround(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & MASK64
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & MASK64
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & MASK64
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & MASK64
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash24(key: bytes, msg: bytes, out128: bool = True) -> tuple[int, ...]:
    """SipHash-2-4 (Aumasson & Bernstein). Returns (lo, hi) 64-bit words, or (h,) for 64-bit output."""
    if len(key) != 16:
        raise ValueError("SipHash key must be 16 bytes")
    k0, k1 = struct.unpack("<QQ", key)
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573
    if out128:
        v1 ^= 0xEE
    n = len(msg)
    full = n - (n % 8)
    for i in range(0, full, 8):
        (m,) = struct.unpack_from("<Q", msg, i)
        v3 ^= m
        v0, v1, v2, v3 = _sipround(*_sipround(v0, v1, v2, v3))
        v0 ^= m
    tail = msg[full:] + b"\x00" * (7 - (n % 8))
    b = ((n & 0xFF) << 56) | int.from_bytes(tail, "little")
    v3 ^= b
    v0, v1, v2, v3 = _sipround(*_sipround(v0, v1, v2, v3))
    v0 ^= b
    v2 ^= 0xEE if out128 else 0xFF
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    lo = v0 ^ v1 ^ v2 ^ v3
    if not out128:
        return (lo,)
    v1 ^= 0xDD
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return lo, v0 ^ v1 ^ v2 ^ v3


# --- Philox4x32-10 ----------------------------------------------------------------------------

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85


def philox4x32_10(ctr: Sequence[int], key: Sequence[int]) -> tuple[int, int, int, int]:
    """One Philox4x32-10 block (Salmon et al. 2011), as in Random123 and cuRAND."""
    c0, c1, c2, c3 = (c & MASK32 for c in ctr)
    k0, k1 = (k & MASK32 for k in key)
    for r in range(10):
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = (
            (p1 >> 32) ^ c1 ^ k0,
            p1 & MASK32,
            (p0 >> 32) ^ c3 ^ k1,
            p0 & MASK32,
        )
        if r < 9:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
    return c0, c1, c2, c3


# --- HeRo v1 randomness -------------------------------------------------------------------------


def encode_context(context: Sequence[int]) -> bytes:
    """PRF message: the h context token ids, oldest first, each as little-endian uint32."""
    return b"".join(struct.pack("<I", int(t)) for t in context)


def prf_seed(key: bytes, context: Sequence[int]) -> tuple[int, int]:
    """(context h-gram, 128-bit key) -> 128-bit seed (s0, s1) = SipHash-2-4-128."""
    s0, s1 = siphash24(key, encode_context(context))
    return s0, s1


def random_u32(seed: tuple[int, int], j: int) -> int:
    """Indexed stream word j: cuRAND's j-th curand() after curand_init(seed=s0, subsequence=s1, 0)."""
    s0, s1 = seed
    block = j >> 2
    ctr = (block & MASK32, (block >> 32) & MASK32, s1 & MASK32, (s1 >> 32) & MASK32)
    key = (s0 & MASK32, (s0 >> 32) & MASK32)
    return philox4x32_10(ctr, key)[j & 3]


def v3_seed(level_seed: tuple[int, int], value_key: bytes) -> tuple[int, int]:
    """Spec v3: the draw seed of one value = the token's level seed XOR the value's 128-bit key.

    The level seed is one SipHash per token and level (`prf_seed(level_key, context)`); each value then costs
    one Philox block (`random_u32(v3_seed(...), j)`) instead of a SipHash and a Philox block."""
    k0, k1 = struct.unpack("<QQ", value_key)
    return level_seed[0] ^ k0, level_seed[1] ^ k1


def table_seed(key: bytes, context: Sequence[int], level_key: bytes | None = None) -> tuple[int, int]:
    """Seed of one key-table entry at one context: v1/v2 SipHash of the entry key, v3 level seed ^ value key."""
    if level_key is None:
        return prf_seed(key, context)
    return v3_seed(prf_seed(level_key, context), key)


def u32_to_uniform(u: int) -> float:
    """U = (u + 1/2) / 2^32, exact in binary64 and strictly inside (0, 1)."""
    return (u + 0.5) / 4294967296.0


def uniform(seed: tuple[int, int], j: int) -> float:
    return u32_to_uniform(random_u32(seed, j))


def evidence(u: int) -> float:
    """Aaronson score -log(1 - U) for stream word u, computed from the exact value 1 - U."""
    return -math.log((4294967295.5 - u) / 4294967296.0)


def position(seed: tuple[int, int], segments: int) -> int:
    """Segment index from word 0 of the position stream: floor(u * K / 2^32)."""
    return (random_u32(seed, 0) * segments) >> 32


# --- vocabulary partition ---------------------------------------------------------------------


def chunk_bounds(size: int, k: int, i: int) -> tuple[int, int]:
    """[start, end) of chunk i when `size` items split into k contiguous chunks differing by <= 1.

    With size = a*k + r, the first k - r chunks have a items and the last r have a + 1.
    """
    a, r = divmod(size, k)
    small = k - r
    if i < small:
        return i * a, (i + 1) * a
    start = small * a + (i - small) * (a + 1)
    return start, start + a + 1


def chunk_of(size: int, k: int, x: int) -> int:
    """Index of the chunk holding item x (0 <= x < size)."""
    a, r = divmod(size, k)
    small = k - r
    if a > 0 and x < small * a:
        return x // a
    return small + (x - small * a) // (a + 1)


def interleave(x: int, vocab_size: int, stride: int) -> int:
    """Routing order of token x under the interleaved layout (stride S = K_1; 0 = identity).

    Tokens are listed by residue class c = x mod S, then by q = x div S: rho(x) = c*a + min(c, r) + q
    with V = a*S + r. Frequent tokens (low ids in BPE vocabularies) are spread over all level-1 chunks.
    """
    if not stride:
        return x
    a, r = divmod(vocab_size, stride)
    c, q = x % stride, x // stride
    return c * a + min(c, r) + q


def deinterleave(y: int, vocab_size: int, stride: int) -> int:
    """Inverse of `interleave`: the token at routing position y."""
    if not stride:
        return y
    a, r = divmod(vocab_size, stride)
    if y < r * (a + 1):
        c, q = divmod(y, a + 1)
    else:
        c, q = divmod(y - r * (a + 1), a)
        c += r
    return q * stride + c


def routing_path(token: int, vocab_size: int, schedule: Sequence[int], stride: int = 0) -> list[int]:
    """Chunk-index path (s_1, ..., s_L) of a token: routing chunks, then index in the final chunk.

    The contiguous partition applies to the token's routing position `interleave(token)`.
    """
    token = interleave(token, vocab_size, stride)
    offset, size, path = 0, vocab_size, []
    for k in schedule:
        i = chunk_of(size, k, token - offset)
        start, end = chunk_bounds(size, k, i)
        path.append(i)
        offset, size = offset + start, end - start
    path.append(token - offset)
    return path


# --- generation step (one row) -----------------------------------------------------------------


def hero_sample(
    probs: Sequence[float],
    schedule: Sequence[int],
    level_keys: Sequence[bytes],
    context: Sequence[int],
    stride: int = 0,
    seed_keys: Sequence[bytes | None] | None = None,
) -> int:
    """Reference HeRo Gumbel-max step: routing by chunk mass, then Gumbel-max inside the chunk.

    `level_keys[l]` is the key-table entry K^(l)(m^(l)) selected by the payload for this position; under
    spec v3 `seed_keys[l]` is level l's key and `level_keys[l]` the value key (`table_seed`).
    With an interleaved layout the vocabulary is first put in routing order.
    """
    seed_keys = seed_keys or [None] * len(level_keys)
    v = len(probs)
    probs = [probs[deinterleave(y, v, stride)] for y in range(v)]
    offset, size = 0, len(probs)
    for level, k in enumerate(schedule):
        seed = table_seed(level_keys[level], context, seed_keys[level])
        best, best_i = -math.inf, 0
        for i in range(k):
            s, e = chunk_bounds(size, k, i)
            w = math.fsum(probs[offset + s : offset + e])
            if w <= 0.0:
                continue
            g = math.log(w) - math.log(-math.log(uniform(seed, i)))
            if g > best:
                best, best_i = g, i
        s, e = chunk_bounds(size, k, best_i)
        offset, size = offset + s, e - s
    seed = table_seed(level_keys[len(schedule)], context, seed_keys[len(schedule)])
    best, best_j = -math.inf, 0
    for j in range(size):
        p = probs[offset + j]
        if p <= 0.0:
            continue
        g = math.log(p) - math.log(-math.log(uniform(seed, j)))
        if g > best:
            best, best_j = g, j
    return deinterleave(offset + best_j, v, stride)


# --- spec v5: position-multiplexed levels (docs/spec.md section 19) ---------------------------

V5_LANES = 100


def v5_lane(pos_key: bytes, context: Sequence[int]) -> int:
    """Lane q in 0..99 of a position: word 0 of its position stream scaled, (u_0 * 100) >> 32."""
    return position(prf_seed(pos_key, context), V5_LANES)


def v5_level(lane: int, percent: int, depth: int) -> int:
    """1-based level a lane carries at public share `percent`: 1 below it, else the deeper levels split the rest
    evenly: 2 + (q - percent) (depth - 1) div (100 - percent)."""
    if lane < percent:
        return 1
    return 2 + (lane - percent) * (depth - 1) // (V5_LANES - percent)


def v5_sample(probs: Sequence[float], value_keys: Sequence[bytes], level_keys: Sequence[bytes], pos_key: bytes,
              context: Sequence[int], percent: int) -> int:
    """Reference spec v5 step (one marked row): the position's level l from its lane, then a whole-token
    Gumbel-max under level l's stream: argmax_j log p_j + G_j, G_j from word j (j = token id) of
    SipHash(level key_l, context) XOR value key_l(m^(l)). `value_keys[l]`: the payload value's key of level l+1;
    `percent`: the public share at this generator index (`Multiplex.public_percent`)."""
    lv = v5_level(v5_lane(pos_key, context), percent, len(value_keys))
    seed = v3_seed(prf_seed(level_keys[lv - 1], context), value_keys[lv - 1])
    best, best_j = -math.inf, 0
    for j, p in enumerate(probs):
        if p <= 0.0:
            continue
        g = math.log(p) - math.log(-math.log(uniform(seed, j)))
        if g > best:
            best, best_j = g, j
    return best_j


def v5_token_evidence(ids: Sequence[int], h: int, pos_key: bytes, level_key: bytes, value_keys: Sequence[bytes],
                      ) -> list[tuple[int, int, list[float]]]:
    """Per scored position of a text (section 8's rule): (text index, lane, evidence per value key) for one level:
    word x_t of SipHash(level key, context) XOR value key. Which positions a level reads (its lanes under a
    hypothesis) is the decoder's choice; the evidence itself is bit-exact on every backend."""
    out = []
    for t in scored_positions(ids, h):
        ctx = ids[t - h : t]
        seed = prf_seed(level_key, ctx)
        out.append((t, v5_lane(pos_key, ctx), [evidence(random_u32(v3_seed(seed, k), ids[t])) for k in value_keys]))
    return out


# --- which generated token is marked ------------------------------------------------------------


def is_marked(generated: int, context: Sequence[int], seen: set[tuple[int, ...]], spec_version: int,
              held: bool = False) -> bool:
    """Whether the token a request draws after `generated` tokens, with context `context` (its last h ids), is a
    watermarked draw; records a new continuation context in `seen` (the request's own set).

    Contexts of the first h tokens touch the prompt, which a verifier never sees: spec v2+ draws those fresh,
    spec v1 marks them (unrecorded either way). So does a row its gated opening still `held` (gpu/opening.py). A
    continuation context already in `seen` is drawn fresh (the decoder skips repeats: `scored_positions`).
    Every step backend (C `sample_step`, Triton `_step_kernel`, torch) is tested against this rule.
    """
    if held or generated < len(context):
        return spec_version < 2
    key = tuple(context)
    if key in seen:
        return False
    seen.add(key)
    return True


# --- decoding (one text) -----------------------------------------------------------------------


def scored_positions(ids: Sequence[int], h: int) -> list[int]:
    """Positions t >= h whose context x[t-h:t] has not occurred at an earlier scored position."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for t in range(h, len(ids)):
        ctx = tuple(ids[t - h : t])
        if ctx in seen:
            continue
        seen.add(ctx)
        out.append(t)
    return out


def window_of(i: int, n: int, windows: int) -> int:
    """Window of the i-th (0-based) of a text's n scored tokens: floor(i * W / n) (spec v2 section 12)."""
    return i * windows // n


def window_scores(
    ids: Sequence[int],
    h: int,
    vocab_size: int,
    schedule: Sequence[int],
    segments: int,
    pos_key: bytes,
    tables: Sequence[tuple],
    stride: int = 0,
    windows: int = 1,
) -> tuple[list[list[list[list[float]]]], list[list[int]]]:
    """Per table ((level, entry keys, per_value[, level key])): scores[w][cell][a], where cell is the position
    segment of the token (segmented tables) or 0 (per-value tables); counts[w][k] tokens per window and
    segment. Every cell is a sequential sum in text order. A table with a level key is a spec v3 table:
    one level seed per token, each entry's draw keyed by it XOR the entry (value) key."""
    positions = scored_positions(ids, h)
    n = len(positions)
    counts = [[0] * segments for _ in range(windows)]
    scores = [
        [[[0.0] * len(keys) for _ in range(1 if per_value else segments)] for _ in range(windows)]
        for _, keys, per_value, *_ in tables
    ]
    for i, t in enumerate(positions):
        ctx = ids[t - h : t]
        w = window_of(i, n, windows)
        k = position(prf_seed(pos_key, ctx), segments)
        counts[w][k] += 1
        path = routing_path(ids[t], vocab_size, schedule, stride)
        for li, (level, keys, per_value, *rest) in enumerate(tables):
            cell = scores[li][w][0 if per_value else k]
            j = path[level - 1]
            if rest and rest[0] is not None:  # spec v3
                seed = prf_seed(rest[0], ctx)
                for a, key in enumerate(keys):
                    cell[a] += evidence(random_u32(v3_seed(seed, key), j))
                continue
            for a, key in enumerate(keys):
                cell[a] += evidence(random_u32(prf_seed(key, ctx), j))
    return scores, counts


def segment_scores(
    ids: Sequence[int],
    h: int,
    vocab_size: int,
    schedule: Sequence[int],
    segments: int,
    pos_key: bytes,
    tables: Sequence[tuple[int, Sequence[bytes]]],
    stride: int = 0,
) -> tuple[list[list[list[float]]], list[int]]:
    """Spec v1 form: per level in `tables` ((level, entry keys)): scores[k][a]; counts[k] tokens."""
    scores, counts = window_scores(ids, h, vocab_size, schedule, segments, pos_key,
                                   [(lv, keys, False) for lv, keys in tables], stride)
    return [s[0] for s in scores], counts[0]
