/*
 * HeRo decoder evidence kernel for CPUs (CPython extension, C99 + optional pthreads); contract in
 * gpu/scoring.py (spec v1 and v2).
 *
 * For every scored token of a right-padded batch: the position segment (SipHash-2-4-128 of the h-gram
 * context under the position key, word 0 of its Philox4x32-10 stream), the window of the token in its
 * row, and, for every key of every requested table, the evidence -log(1 - U) of stream word s_l of
 * SipHash(key, context), added to the cell (row, window, segment or 0, candidate).
 *
 * Bit-exactness with verifier/engine/reference.py:
 *   - integer parts (SipHash, Philox, routing, position) are exact by construction;
 *   - the evidence uses libm log() on the same float64 value (2^32 - 1/2 - u) / 2^32 that the
 *     reference hands to math.log (CPython's math.log calls libm log);
 *   - every cell is a sequential sum in text order, as in the reference.
 * So with the same libm, results are identical bit for bit, and always reproducible run to run.
 *
 * Spec v3 ("seeded" tables): one SipHash-2-4-128 seed per token and table under the level key (phase 2),
 * then per candidate one Philox4x32-10 block of (seed XOR the candidate's value key) (phase 3).
 *
 * Spec v5 read filter (optional, segments = the 100 lanes): after phase 2's segments, only the tokens whose level
 * (from the lane and the text index, ReadFilter in gpu/scoring.py) is the filter's level are kept, in order; seeds,
 * windows (by rank among the kept tokens), scores and counts then see the kept tokens only.
 *
 * Work split: (1) context masking (dedup) per row and the window of each token, sequential; (2) per
 * scored token (threads over tokens): message words, segment, routing path; (3) work items (row, table, slice of 256
 * candidates) from a shared counter: each item owns its cells and walks the row's tokens in order,
 * so no cell is written by two threads and no [tokens x candidates] buffer is needed (a v2 private
 * level has 4096 candidates). Phases 2 and 3 have a portable version and, on x86-64 with GCC, AVX2
 * and AVX-512 versions, chosen at import by CPUID (see `isas` below); all give the same bits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#define HERO_THREADS 1
#else
#define HERO_THREADS 0
#endif

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                  \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                     \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                     \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                  \
    } while (0)

/* SipHash-2-4-128 over pre-packed message words (the last word carries length and tail). */
static inline void siphash128(uint64_t k0, uint64_t k1, const uint64_t *m, int nwords, uint64_t *lo,
                              uint64_t *hi) {
    uint64_t v0 = k0 ^ 0x736F6D6570736575ULL;
    uint64_t v1 = k1 ^ 0x646F72616E646F6DULL ^ 0xEEULL;
    uint64_t v2 = k0 ^ 0x6C7967656E657261ULL;
    uint64_t v3 = k1 ^ 0x7465646279746573ULL;
    for (int i = 0; i < nwords; i++) {
        v3 ^= m[i];
        SIPROUND;
        SIPROUND;
        v0 ^= m[i];
    }
    v2 ^= 0xEE;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    *lo = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xDD;
    SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    *hi = v0 ^ v1 ^ v2 ^ v3;
}

/* The whole Philox4x32-10 block `block` of seed (s0, s1): stream words 4*block .. 4*block+3. */
static inline void philox_block(uint64_t s0, uint64_t s1, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)s1, c3 = (uint32_t)(s1 >> 32);
    uint32_t k0 = (uint32_t)s0, k1 = (uint32_t)(s0 >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53U * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57U * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9U;
        k1 += 0xBB67AE85U;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Stream word j of seed (s0, s1): lane j%4 of Philox4x32-10 block (j/4, 0, s1.lo, s1.hi), key s0. */
static inline uint32_t philox_word(uint64_t s0, uint64_t s1, uint64_t j) {
    uint32_t w[4];
    philox_block(s0, s1, j >> 2, w);
    return w[j & 3];
}

/* a / b for 0 <= a, 1 <= b: in 32 bits when both fit (the usual case: a 64-bit divide is several times
 * slower on many x86 CPUs, and the routing path of every token needs a few). */
static inline int64_t div_nn(int64_t a, int64_t b) {
    if (((uint64_t)a | (uint64_t)b) <= 0xFFFFFFFFULL) return (int64_t)((uint32_t)a / (uint32_t)b);
    return a / b;
}

typedef struct {
    /* inputs */
    const int64_t *ids;
    int64_t B, T, h, vocab, segments, windows, nsched, ntables;
    const int64_t *schedule, *levels, *sizes, *per_value;
    int64_t stride; /* interleaved routing layout (spec section 6.1); 0 = contiguous */
    const uint64_t *k0, *k1; /* all tables' key words, concatenated */
    const int64_t *koff;     /* [ntables] first key of each table */
    uint64_t pk0, pk1;
    int64_t n;                         /* scored tokens */
    const int64_t *tok_row, *tok_pos;  /* [n], grouped by row in text order */
    const int64_t *row_start;          /* [B + 1] */
    /* per scored token, from phase 2 */
    int64_t *seg, *win, *path; /* [n], [n], [n, nsched + 1] */
    uint64_t *msg;             /* [n, nwords] */
    int nwords;
    /* output: table t occupies [B, W, cells_t, C_t] at ooff[t] */
    double *out;
    const int64_t *ooff;
    /* work items of phase 3: (row, table, candidate slice) */
    int64_t slice, nitems;
    const int64_t *item_table_first; /* [ntables + 1] slices per row, prefix sums */
    int64_t next;                    /* shared work counter */
    /* spec v3: seeded[t] != 0 for a table with a level key (sk0[t], sk1[t]); tseed [n, ntables, 2] */
    const int64_t *seeded;
    const uint64_t *sk0, *sk1;
    uint64_t *tseed;
    /* spec v5: NULL, or (front_tokens, front_public, public, depth, level, excerpt) */
    const int64_t *read;
} Work;

typedef struct {
    Work *w;
    int64_t lo, hi; /* token range (phase 2) */
    int phase;
} Slice;

/* Portable path: four candidates at a time, SipHash and Philox in 4-lane vectors (GCC/Clang vector
 * extensions), log() per lane from libm. x86-64 CPUs with AVX2 take the faster paths further down. */
#if defined(__GNUC__) || defined(__clang__)
#define HERO_VEC 1
typedef uint64_t v4u __attribute__((vector_size(32)));
#define VROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define VSIPROUND                                                                                  \
    do {                                                                                           \
        v0 += v1; v1 = VROTL(v1, 13); v1 ^= v0; v0 = VROTL(v0, 32);                                \
        v2 += v3; v3 = VROTL(v3, 16); v3 ^= v2;                                                    \
        v0 += v3; v3 = VROTL(v3, 21); v3 ^= v0;                                                    \
        v2 += v1; v1 = VROTL(v1, 17); v1 ^= v2; v2 = VROTL(v2, 32);                                \
    } while (0)
#else
#define HERO_VEC 0
#endif

/* x86-64 with GCC: explicit AVX2 and AVX-512 paths (below), picked at run time by CPUID. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HERO_X86 1
#include <immintrin.h>
#else
#define HERO_X86 0
#endif

static void prepare_message(const Work *w, int64_t n, uint64_t *msg, int64_t *token) {
    const int64_t h = w->h;
    const int64_t *ctx = w->ids + w->tok_row[n] * w->T + (w->tok_pos[n] - h);
    for (int64_t i = 0; i < h / 2; i++)
        msg[i] = ((uint64_t)ctx[2 * i] & 0xFFFFFFFFULL) | ((uint64_t)ctx[2 * i + 1] << 32);
    uint64_t last = (uint64_t)((4 * h) & 0xFF) << 56;
    if (h & 1) last |= (uint64_t)ctx[h - 1] & 0xFFFFFFFFULL;
    msg[h / 2] = last;
    *token = ctx[h];
}

/* Routing position of a token under the interleaved layout: rho(x) = c*a + min(c, r) + q. */
static inline int64_t interleave(int64_t x, int64_t vocab, int64_t stride) {
    if (stride <= 0) return x;
    int64_t a = div_nn(vocab, stride), r = vocab - a * stride, q = div_nn(x, stride), c = x - q * stride;
    return c * a + (c < r ? c : r) + q;
}

/* Routing path of a token: at each level its range of `size` ids is split into k chunks whose sizes
 * differ by at most one (the first `small` chunks have a = size / k ids, the others a + 1); path[l] is the
 * chunk index, path[nsched] the offset in the last chunk. */
static void routing_path(const Work *w, int64_t token, int64_t *path) {
    int64_t offset = 0, size = w->vocab;
    token = interleave(token, w->vocab, w->stride);
    for (int64_t l = 0; l < w->nsched; l++) {
        int64_t k = w->schedule[l], a = div_nn(size, k), small = k - (size - a * k), x = token - offset;
        if (a > 0 && x < small * a) {
            int64_t i = div_nn(x, a);
            path[l] = i;
            offset += i * a;
            size = a;
        } else {
            int64_t q = div_nn(x - small * a, a + 1);
            path[l] = small + q;
            offset += small * a + q * (a + 1);
            size = a + 1;
        }
    }
    path[w->nsched] = token - offset;
}

static inline int64_t segment_of(const Work *w, uint32_t word0) {
    return (int64_t)(((uint64_t)word0 * (uint64_t)w->segments) >> 32);
}

/* Phase 2, per scored token: packed message, position segment and routing path. */
static void prepare_tokens_generic(Work *w, int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; n++) {
        int64_t token;
        uint64_t s0, s1, *msg = w->msg + n * w->nwords;
        prepare_message(w, n, msg, &token);
        siphash128(w->pk0, w->pk1, msg, w->nwords, &s0, &s1);
        w->seg[n] = segment_of(w, philox_word(s0, s1, 0));
        routing_path(w, token, w->path + n * (w->nsched + 1));
    }
}

/* What a phase-3 work item (row r, table t) reads and writes, for every score_item path. */
typedef struct {
    int64_t C, lvl, L1, cells;    /* candidates, level index, routing path stride, cells per window */
    const uint64_t *K0, *K1;      /* the table's key words */
    double *base;                 /* row r's [W, cells, C] block of the table's output */
    const uint64_t *tseed;        /* v3: the table's seed of token n at tseed[n * sstride] */
    int64_t sstride;
} Item;

static inline Item item_of(const Work *w, int64_t r, int64_t t) {
    Item it;
    it.C = w->sizes[t];
    it.lvl = w->levels[t] - 1;
    it.L1 = w->nsched + 1;
    it.cells = w->per_value[t] ? 1 : w->segments;
    it.K0 = w->k0 + w->koff[t];
    it.K1 = w->k1 + w->koff[t];
    it.base = w->out + w->ooff[t] + r * w->windows * it.cells * it.C;
    it.tseed = w->tseed + 2 * t;
    it.sstride = 2 * w->ntables;
    return it;
}

/* Token n's C scores: its window's cell (its position segment, or the one cell of a per-value table). */
static inline double *cell_of(const Work *w, const Item *it, int64_t n) {
    return it->base + (w->win[n] * it->cells + (it->cells == 1 ? 0 : w->seg[n])) * it->C;
}

/* The evidence of one stream word u: -log((2^32 - 0.5 - u) / 2^32) with libm's log, as the reference computes it. */
static inline double evidence(uint32_t u) { return -log((4294967295.5 - (double)u) / 4294967296.0); }

#if HERO_VEC
/* Four seeds (lo4, hi4): word j of each Philox4x32-10 stream (32-bit words held in 64-bit lanes; one block
 * index for all lanes), its evidence added to dst[0..3]. */
static inline void philox_add_x4(const v4u *plo, const v4u *phi, uint64_t j, double *dst) {
    const v4u lo4 = *plo, hi4 = *phi;
    const v4u m32 = {0xFFFFFFFFULL, 0xFFFFFFFFULL, 0xFFFFFFFFULL, 0xFFFFFFFFULL};
    const uint64_t blk = j >> 2;
    v4u cc0 = m32 & (blk & 0xFFFFFFFFULL), cc1 = m32 & (blk >> 32), cc2 = hi4 & m32, cc3 = hi4 >> 32;
    v4u kk0 = lo4 & m32, kk1 = lo4 >> 32;
    for (int q = 0; q < 10; q++) {
        v4u p0 = cc0 * 0xD2511F53ULL;
        v4u p1 = cc2 * 0xCD9E8D57ULL;
        cc0 = (p1 >> 32) ^ cc1 ^ kk0;
        cc1 = p1 & m32;
        cc2 = (p0 >> 32) ^ cc3 ^ kk1;
        cc3 = p0 & m32;
        kk0 = (kk0 + 0x9E3779B9ULL) & m32;
        kk1 = (kk1 + 0xBB67AE85ULL) & m32;
    }
    const v4u u = (j & 3) == 0 ? cc0 : (j & 3) == 1 ? cc1 : (j & 3) == 2 ? cc2 : cc3;
    for (int l = 0; l < 4; l++) dst[l] += evidence((uint32_t)u[l]);
}
#endif

/* Candidates [c, c1) of token n, one at a time, added to dst (the scalar tail of every path). */
static inline void score_scalar(const Work *w, const Item *it, int64_t n, int64_t c, int64_t c1, double *dst) {
    const uint64_t *msg = w->msg + n * w->nwords;
    const uint64_t j = (uint64_t)w->path[n * it->L1 + it->lvl];
    for (; c < c1; c++) {
        uint64_t s0, s1;
        siphash128(it->K0[c], it->K1[c], msg, w->nwords, &s0, &s1);
        dst[c] += evidence(philox_word(s0, s1, j));
    }
}

/* Phase 3, one work item: candidates [c0, c1) of table t for every scored token of row r, added to
 * their cells in text order (each cell belongs to exactly one item: deterministic sums). */
static void score_item_generic(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    const Item it = item_of(w, r, t);
    const int nwords = w->nwords;
    for (int64_t n = w->row_start[r]; n < w->row_start[r + 1]; n++) {
        double *dst = cell_of(w, &it, n);
        int64_t c = c0;
#if HERO_VEC
        const uint64_t *msg = w->msg + n * nwords;
        const uint64_t j = (uint64_t)w->path[n * it.L1 + it.lvl];
        for (; c + 4 <= c1; c += 4) {
            v4u k0, k1;
            memcpy(&k0, it.K0 + c, sizeof k0);
            memcpy(&k1, it.K1 + c, sizeof k1);
            v4u v0 = k0 ^ 0x736F6D6570736575ULL;
            v4u v1 = k1 ^ (0x646F72616E646F6DULL ^ 0xEEULL);
            v4u v2 = k0 ^ 0x6C7967656E657261ULL;
            v4u v3 = k1 ^ 0x7465646279746573ULL;
            for (int i = 0; i < nwords; i++) {
                v3 ^= msg[i];
                VSIPROUND;
                VSIPROUND;
                v0 ^= msg[i];
            }
            v2 ^= 0xEE;
            VSIPROUND; VSIPROUND; VSIPROUND; VSIPROUND;
            v4u lo4 = v0 ^ v1 ^ v2 ^ v3;
            v1 ^= 0xDD;
            VSIPROUND; VSIPROUND; VSIPROUND; VSIPROUND;
            v4u hi4 = v0 ^ v1 ^ v2 ^ v3;
            philox_add_x4(&lo4, &hi4, j, dst + c);
        }
#endif
        score_scalar(w, &it, n, c, c1, dst);
    }
}

/* Phase 2 for v3 tables: token n's seed under each seeded table's level key (a few per token, scalar). */
static void prepare_seeds(Work *w, int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; n++)
        for (int64_t t = 0; t < w->ntables; t++)
            if (w->seeded[t])
                siphash128(w->sk0[t], w->sk1[t], w->msg + n * w->nwords, w->nwords, &w->tseed[(n * w->ntables + t) * 2],
                           &w->tseed[(n * w->ntables + t) * 2 + 1]);
}

/* v3 candidates [c, c1) of token n, one at a time: Philox block of (seed ^ value key). */
static inline void score_seeded_scalar(const Item *it, const uint64_t *sd, uint64_t j, int64_t c, int64_t c1,
                                       double *dst) {
    for (; c < c1; c++) dst[c] += evidence(philox_word(sd[0] ^ it->K0[c], sd[1] ^ it->K1[c], j));
}

/* Phase 3 for a v3 table (see score_item_generic): no SipHash per candidate, one Philox block each. */
static void score_seeded_generic(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    const Item it = item_of(w, r, t);
    for (int64_t n = w->row_start[r]; n < w->row_start[r + 1]; n++) {
        double *dst = cell_of(w, &it, n);
        const uint64_t *sd = it.tseed + n * it.sstride;
        const uint64_t j = (uint64_t)w->path[n * it.L1 + it.lvl];
        int64_t c = c0;
#if HERO_VEC
        for (; c + 4 <= c1; c += 4) {
            v4u k0, k1;
            memcpy(&k0, it.K0 + c, sizeof k0);
            memcpy(&k1, it.K1 + c, sizeof k1);
            const v4u lo4 = k0 ^ sd[0], hi4 = k1 ^ sd[1];
            philox_add_x4(&lo4, &hi4, j, dst + c);
        }
#endif
        score_seeded_scalar(&it, sd, j, c, c1, dst);
    }
}

#if HERO_X86
/* The PRF is one long dependency chain per lane group (12 SipHash rounds, then 10 Philox rounds), so
 * the x86 paths run HERO_NV independent groups of 4 lanes side by side for instruction-level
 * parallelism. A "job" is 4 consecutive candidates of one token (the scoring phase) or 4 tokens under
 * the position key (the token phase). Every integer step is exact and log() is still libm's, per lane,
 * so all paths give the same bits. The helpers are AVX2; the AVX-512 entry points inline the same code,
 * where GCC turns the generic 64-bit rotates into single vprolq instructions. */
#ifndef HERO_NV
#define HERO_NV 3
#endif
#define HERO_MAX_WORDS 9 /* message words: h / 2 + 1 with h <= 16 */
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))
#define AVX2_FN __attribute__((target("avx2")))
#define AVX512_FN __attribute__((target("avx2,avx512f,avx512vl")))

/* rotations by 32 and 16 are word/byte shuffles (one instruction on AVX2, no shift port) */
AVX2_INLINE v4u rotl32_x4(v4u x) { return (v4u)_mm256_shuffle_epi32((__m256i)x, 0xB1); }
AVX2_INLINE v4u rotl16_x4(v4u x) {
    const __m256i idx = _mm256_setr_epi8(6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13, 6, 7, 0, 1, 2, 3,
                                         4, 5, 14, 15, 8, 9, 10, 11, 12, 13);
    return (v4u)_mm256_shuffle_epi8((__m256i)x, idx);
}
/* low 32 bits of each lane times a 32-bit constant, full 64-bit product (vpmuludq; a plain 64-bit
 * vector multiply would cost three of them, or a slow vpmullq) */
AVX2_INLINE v4u mul32_x4(v4u x, uint32_t k) {
    return (v4u)_mm256_mul_epu32((__m256i)x, _mm256_set1_epi64x((long long)k));
}

#define SIPROUND_NV                                                                                \
    do {                                                                                           \
        for (int e = 0; e < HERO_NV; e++) {                                                        \
            v0[e] += v1[e]; v1[e] = VROTL(v1[e], 13); v1[e] ^= v0[e]; v0[e] = rotl32_x4(v0[e]);   \
            v2[e] += v3[e]; v3[e] = rotl16_x4(v3[e]); v3[e] ^= v2[e];                              \
            v0[e] += v3[e]; v3[e] = VROTL(v3[e], 21); v3[e] ^= v0[e];                              \
            v2[e] += v1[e]; v1[e] = VROTL(v1[e], 17); v1[e] ^= v2[e]; v2[e] = rotl32_x4(v2[e]);   \
        }                                                                                          \
    } while (0)

/* HERO_NV groups of 4 lanes: seed = SipHash-2-4-128(k0, k1; m), m[i * HERO_NV + e] the message words of
 * group e; then Philox4x32-10 block blk of that seed: out[e][q] holds stream word 4 * blk + q in the low
 * 32 bits of each lane (the high bits are garbage: vpmuludq ignores them, so they are never masked). */
AVX2_INLINE void prf_nv(const v4u *k0, const v4u *k1, const v4u *m, int nwords, const v4u *blk,
                        v4u out[HERO_NV][4]) {
    v4u v0[HERO_NV], v1[HERO_NV], v2[HERO_NV], v3[HERO_NV];
    for (int e = 0; e < HERO_NV; e++) {
        v0[e] = k0[e] ^ 0x736F6D6570736575ULL;
        v1[e] = k1[e] ^ (0x646F72616E646F6DULL ^ 0xEEULL);
        v2[e] = k0[e] ^ 0x6C7967656E657261ULL;
        v3[e] = k1[e] ^ 0x7465646279746573ULL;
    }
    for (int i = 0; i < nwords; i++) {
        for (int e = 0; e < HERO_NV; e++) v3[e] ^= m[i * HERO_NV + e];
        SIPROUND_NV;
        SIPROUND_NV;
        for (int e = 0; e < HERO_NV; e++) v0[e] ^= m[i * HERO_NV + e];
    }
    for (int e = 0; e < HERO_NV; e++) v2[e] ^= 0xEE;
    SIPROUND_NV; SIPROUND_NV; SIPROUND_NV; SIPROUND_NV;
    v4u lo[HERO_NV], c0[HERO_NV], c1[HERO_NV], c2[HERO_NV], c3[HERO_NV], kk0[HERO_NV], kk1[HERO_NV];
    for (int e = 0; e < HERO_NV; e++) {
        lo[e] = v0[e] ^ v1[e] ^ v2[e] ^ v3[e];
        v1[e] ^= 0xDD;
    }
    SIPROUND_NV; SIPROUND_NV; SIPROUND_NV; SIPROUND_NV;
    for (int e = 0; e < HERO_NV; e++) {
        v4u hi = v0[e] ^ v1[e] ^ v2[e] ^ v3[e];
        c0[e] = blk[e];
        c1[e] = blk[e] >> 32;
        c2[e] = hi;
        c3[e] = hi >> 32;
        kk0[e] = lo[e];
        kk1[e] = lo[e] >> 32;
    }
    for (int q = 0; q < 10; q++)
        for (int e = 0; e < HERO_NV; e++) {
            v4u p0 = mul32_x4(c0[e], 0xD2511F53U), p1 = mul32_x4(c2[e], 0xCD9E8D57U);
            c0[e] = (p1 >> 32) ^ c1[e] ^ kk0[e];
            c2[e] = (p0 >> 32) ^ c3[e] ^ kk1[e];
            c1[e] = p1;
            c3[e] = p0;
            kk0[e] += 0x9E3779B9U;
            kk1[e] += 0xBB67AE85U;
        }
    for (int e = 0; e < HERO_NV; e++) {
        out[e][0] = c0[e];
        out[e][1] = c1[e];
        out[e][2] = c2[e];
        out[e][3] = c3[e];
    }
}

AVX2_INLINE v4u bcast_x4(uint64_t x) { return (v4u){x, x, x, x}; }

/* Phase 3 work item (see score_item_generic): jobs of 4 candidates in token-major order, HERO_NV at a
 * time. The PRF words of up to HERO_BATCH jobs are computed first, then the log() pass adds them to
 * their cells in job order (so each cell still gets its tokens in text order): keeping the libm calls
 * out of the vector loop spares reloading its constants after each call. Candidates past the last
 * multiple of 4 go through the scalar code. */
#define HERO_BATCH 64
AVX2_INLINE void score_item_x4(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    const Item it = item_of(w, r, t);
    const int nwords = w->nwords;
    const int64_t ns = w->row_start[r], ne = w->row_start[r + 1], cv = c0 + (c1 - c0) / 4 * 4;
    int64_t n = ns, c = c0;
    while (cv > c0 && n < ne) {
        uint32_t u[HERO_BATCH][4];
        double *dst[HERO_BATCH];
        int nb = 0;
        while (nb <= HERO_BATCH - HERO_NV && n < ne) {
            int64_t jn[HERO_NV], jc[HERO_NV];
            int nj = 0;
            v4u k0[HERO_NV], k1[HERO_NV], blk[HERO_NV], m[HERO_MAX_WORDS * HERO_NV], out[HERO_NV][4];
            for (int e = 0; e < HERO_NV; e++) {
                if (n < ne) { /* next job; past the row's end, repeat the last one and drop its result */
                    jn[e] = n;
                    jc[e] = c;
                    nj++;
                    if ((c += 4) == cv) c = c0, n++;
                } else {
                    jn[e] = jn[e - 1];
                    jc[e] = jc[e - 1];
                }
                memcpy(&k0[e], it.K0 + jc[e], sizeof k0[e]);
                memcpy(&k1[e], it.K1 + jc[e], sizeof k1[e]);
                blk[e] = bcast_x4((uint64_t)w->path[jn[e] * it.L1 + it.lvl] >> 2);
                for (int i = 0; i < nwords; i++) m[i * HERO_NV + e] = bcast_x4(w->msg[jn[e] * nwords + i]);
            }
            prf_nv(k0, k1, m, nwords, blk, out);
            for (int e = 0; e < nj; e++, nb++) {
                const int64_t tn = jn[e];
                const v4u x = out[e][w->path[tn * it.L1 + it.lvl] & 3];
                for (int l = 0; l < 4; l++) u[nb][l] = (uint32_t)x[l];
                dst[nb] = cell_of(w, &it, tn) + jc[e];
            }
        }
        for (int b = 0; b < nb; b++)
            for (int l = 0; l < 4; l++) dst[b][l] += evidence(u[b][l]);
    }
    for (n = ns; cv < c1 && n < ne; n++) score_scalar(w, &it, n, cv, c1, cell_of(w, &it, n));
}

/* Phase 2 (see prepare_tokens_generic): the position-key PRF of 4 * HERO_NV tokens at a time. */
AVX2_INLINE void prepare_tokens_x4(Work *w, int64_t lo, int64_t hi) {
    const int nwords = w->nwords;
    for (int64_t n0 = lo; n0 < hi; n0 += 4 * HERO_NV) {
        int64_t token[4 * HERO_NV];
        const int cnt = hi - n0 < 4 * HERO_NV ? (int)(hi - n0) : 4 * HERO_NV;
        for (int l = 0; l < cnt; l++) prepare_message(w, n0 + l, w->msg + (n0 + l) * nwords, &token[l]);
        v4u k0[HERO_NV], k1[HERO_NV], blk[HERO_NV], m[HERO_MAX_WORDS * HERO_NV], out[HERO_NV][4];
        for (int e = 0; e < HERO_NV; e++) {
            k0[e] = bcast_x4(w->pk0);
            k1[e] = bcast_x4(w->pk1);
            blk[e] = bcast_x4(0);
            for (int i = 0; i < nwords; i++)
                for (int l = 0; l < 4; l++) { /* lanes past the end repeat the last token */
                    int64_t tn = n0 + (4 * e + l < cnt ? 4 * e + l : cnt - 1);
                    m[i * HERO_NV + e][l] = w->msg[tn * nwords + i];
                }
        }
        prf_nv(k0, k1, m, nwords, blk, out);
        for (int l = 0; l < cnt; l++) {
            w->seg[n0 + l] = segment_of(w, (uint32_t)out[l / 4][0][l % 4]);
            routing_path(w, token[l], w->path + (n0 + l) * (w->nsched + 1));
        }
    }
}

/* Phase 3 for a v3 table on AVX2: HERO_NV groups of 4 candidates, one Philox block each (no SipHash). */
AVX2_INLINE void score_seeded_x4(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    const Item it = item_of(w, r, t);
    for (int64_t n = w->row_start[r]; n < w->row_start[r + 1]; n++) {
        double *dst = cell_of(w, &it, n);
        const uint64_t *sd = it.tseed + n * it.sstride;
        const uint64_t j = (uint64_t)w->path[n * it.L1 + it.lvl], blk = j >> 2;
        const v4u s0 = bcast_x4(sd[0]), s1 = bcast_x4(sd[1]);
        int64_t c = c0;
        for (; c + 4 * HERO_NV <= c1; c += 4 * HERO_NV) {
            v4u cc0[HERO_NV], cc1[HERO_NV], cc2[HERO_NV], cc3[HERO_NV], kk0[HERO_NV], kk1[HERO_NV];
            for (int e = 0; e < HERO_NV; e++) {
                v4u k0, k1;
                memcpy(&k0, it.K0 + c + 4 * e, sizeof k0);
                memcpy(&k1, it.K1 + c + 4 * e, sizeof k1);
                v4u lo = k0 ^ s0, hi = k1 ^ s1;
                cc0[e] = bcast_x4(blk);
                cc1[e] = bcast_x4(blk >> 32);
                cc2[e] = hi;
                cc3[e] = hi >> 32;
                kk0[e] = lo;
                kk1[e] = lo >> 32;
            }
            for (int q = 0; q < 10; q++)
                for (int e = 0; e < HERO_NV; e++) {
                    v4u p0 = mul32_x4(cc0[e], 0xD2511F53U), p1 = mul32_x4(cc2[e], 0xCD9E8D57U);
                    cc0[e] = (p1 >> 32) ^ cc1[e] ^ kk0[e];
                    cc2[e] = (p0 >> 32) ^ cc3[e] ^ kk1[e];
                    cc1[e] = p1;
                    cc3[e] = p0;
                    kk0[e] += 0x9E3779B9U;
                    kk1[e] += 0xBB67AE85U;
                }
            for (int e = 0; e < HERO_NV; e++) {
                const v4u u = (j & 3) == 0 ? cc0[e] : (j & 3) == 1 ? cc1[e] : (j & 3) == 2 ? cc2[e] : cc3[e];
                for (int l = 0; l < 4; l++) dst[c + 4 * e + l] += evidence((uint32_t)u[l]);
            }
        }
        score_seeded_scalar(&it, sd, j, c, c1, dst);
    }
}

static AVX2_FN void score_seeded_avx2(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    score_seeded_x4(w, r, t, c0, c1);
}
static AVX512_FN void score_seeded_avx512(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    score_seeded_x4(w, r, t, c0, c1);
}

static AVX2_FN void score_item_avx2(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    score_item_x4(w, r, t, c0, c1);
}
static AVX2_FN void prepare_tokens_avx2(Work *w, int64_t lo, int64_t hi) { prepare_tokens_x4(w, lo, hi); }
static AVX512_FN void score_item_avx512(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    score_item_x4(w, r, t, c0, c1);
}
static AVX512_FN void prepare_tokens_avx512(Work *w, int64_t lo, int64_t hi) { prepare_tokens_x4(w, lo, hi); }
#endif /* HERO_X86 */

/* Kernel paths, best first: the first one this CPU has is chosen at import; isa() can force another
 * (the tests run every path the CPU has and compare). */
typedef struct {
    const char *name;
    void (*score_item)(const Work *, int64_t, int64_t, int64_t, int64_t);
    void (*prepare_tokens)(Work *, int64_t, int64_t);
    int needs;
    void (*score_seeded)(const Work *, int64_t, int64_t, int64_t, int64_t); /* spec v3 tables */ /* 2: AVX-512 (F, VL) and AVX2, 1: AVX2, 0: nothing */
} Isa;

static const Isa isas[] = {
#if HERO_X86
    {"avx512", score_item_avx512, prepare_tokens_avx512, 2, score_seeded_avx512},
    {"avx2", score_item_avx2, prepare_tokens_avx2, 1, score_seeded_avx2},
#endif
    {"generic", score_item_generic, prepare_tokens_generic, 0, score_seeded_generic},
};
#define NISAS ((int)(sizeof isas / sizeof isas[0]))
static const Isa *isa = &isas[NISAS - 1];

static int isa_supported(const Isa *p) {
#if HERO_X86
    __builtin_cpu_init();
    if (p->needs >= 1 && !__builtin_cpu_supports("avx2")) return 0;
    if (p->needs >= 2 && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))) return 0;
#endif
    return 1;
}

static void run_items(Work *w) {
    for (;;) {
        int64_t it = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
        if (it >= w->nitems) return;
        const int64_t per_row = w->item_table_first[w->ntables];
        int64_t r = it / per_row, rem = it % per_row, t = 0;
        while (rem >= w->item_table_first[t + 1]) t++;
        int64_t c0 = (rem - w->item_table_first[t]) * w->slice;
        int64_t c1 = c0 + w->slice < w->sizes[t] ? c0 + w->slice : w->sizes[t];
        if (w->row_start[r + 1] > w->row_start[r]) (w->seeded[t] ? isa->score_seeded : isa->score_item)(w, r, t, c0, c1);
    }
}

#if HERO_THREADS
static void *slice_main(void *arg) {
    Slice *s = (Slice *)arg;
    if (s->phase == 2) {
        isa->prepare_tokens(s->w, s->lo, s->hi);
        if (!s->w->read) prepare_seeds(s->w, s->lo, s->hi);
    } else if (s->phase == 4)
        prepare_seeds(s->w, s->lo, s->hi);
    else
        run_items(s->w);
    return NULL;
}
#endif

/* Runs phase 2 (token slices), phase 4 (seeds of kept tokens, token slices) or phase 3 (shared item queue) on nt
 * threads, the caller included. */
static void parallel(Work *w, int phase, int nt) {
#if HERO_THREADS
    if (nt > 1) {
        pthread_t th[64];
        Slice sl[64];
        int started[64] = {0};
        for (int i = 0; i < nt; i++) {
            sl[i].w = w;
            sl[i].phase = phase;
            sl[i].lo = w->n * i / nt;
            sl[i].hi = w->n * (i + 1) / nt;
            if (i > 0) started[i] = pthread_create(&th[i], NULL, slice_main, &sl[i]) == 0;
        }
        slice_main(&sl[0]);
        for (int i = 1; i < nt; i++) {
            if (started[i])
                pthread_join(th[i], NULL);
            else
                slice_main(&sl[i]); /* could not start a thread: do its share here */
        }
        return;
    }
#endif
    if (phase == 2) {
        isa->prepare_tokens(w, 0, w->n);
        if (!w->read) prepare_seeds(w, 0, w->n);
    } else if (phase == 4)
        prepare_seeds(w, 0, w->n);
    else
        run_items(w);
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* Context masking: positions t >= h (t < length) whose h-gram context is new in the row. */
static int64_t select_tokens(const int64_t *ids, const int64_t *lengths, int64_t B, int64_t T, int64_t h,
                             int64_t *tok_row, int64_t *tok_pos, int64_t *table, int64_t cap) {
    int64_t n = 0;
    for (int64_t r = 0; r < B; r++) {
        int64_t len = lengths[r] < T ? lengths[r] : T;
        if (len <= h) continue;
        const int64_t *row = ids + r * T;
        for (int64_t t = 0; t < len; t++)
            if (row[t] < 0 || row[t] > 0xFFFFFFFFLL) return -1;
        memset(table, 0, (size_t)cap * sizeof(int64_t));
        for (int64_t t = h; t < len; t++) {
            const int64_t *ctx = row + t - h;
            /* any hash works (only exact matches count); one mix64 per context, not one per id */
            uint64_t hv = 0;
            for (int64_t i = 0; i < h; i++) hv = (hv ^ (uint64_t)ctx[i]) * 0x9E3779B97F4A7C15ULL;
            hv = mix64(hv);
            int64_t slot = (int64_t)(hv & (uint64_t)(cap - 1));
            int dup = 0;
            while (table[slot]) {
                const int64_t *other = row + table[slot] - h;
                int64_t i = 0;
                while (i < h && other[i] == ctx[i]) i++; /* inline: h is small, a memcmp call costs more */
                if (i == h) {
                    dup = 1;
                    break;
                }
                slot = (slot + 1) & (cap - 1);
            }
            if (dup) continue;
            table[slot] = t;
            tok_row[n] = r;
            tok_pos[n] = t;
            n++;
        }
    }
    return n;
}

/* Spec v5 read filter: keeps, in order, the tokens whose level (lane = seg, segments = 100) is rd[4]; the kept
 * tokens' row, position, segment, routing path and message move down. Returns the kept count. */
static int64_t read_filter(Work *w) {
    const int64_t *rd = w->read, L1 = w->nsched + 1;
    int64_t k = 0;
    for (int64_t i = 0; i < w->n; i++) {
        const int64_t q = w->seg[i];
        const int64_t pct = (!rd[5] && w->tok_pos[i] < rd[0]) ? rd[1] : rd[2];
        const int64_t level = q < pct ? 1 : 2 + (q - pct) * (rd[3] - 1) / (100 - pct);
        if (level != rd[4]) continue;
        if (k != i) {
            ((int64_t *)w->tok_row)[k] = w->tok_row[i];
            ((int64_t *)w->tok_pos)[k] = w->tok_pos[i];
            w->seg[k] = q;
            memmove(w->path + k * L1, w->path + i * L1, (size_t)L1 * sizeof(int64_t));
            memmove(w->msg + k * w->nwords, w->msg + i * w->nwords, (size_t)w->nwords * sizeof(uint64_t));
        }
        k++;
    }
    return k;
}

/* Scratch memory of one call. One block is kept between calls and lent to one call at a time (others,
 * if any run at once, malloc their own): a fresh multi-megabyte block per call goes back to the OS at
 * free() and page-faults in again on the next call (~400 faults per 128-text call: ~2.5 us per text). */
#define SCRATCH_KEEP_MAX ((size_t)256 << 20) /* bytes; a larger block is freed after its call */
static void *scratch_block;
static size_t scratch_size;
static int scratch_busy;

static void *scratch_get(size_t bytes, int *cached) {
    *cached = 0;
    if (bytes > SCRATCH_KEEP_MAX || __atomic_exchange_n(&scratch_busy, 1, __ATOMIC_ACQUIRE)) return malloc(bytes);
    if (scratch_size < bytes) {
        free(scratch_block);
        scratch_block = malloc(bytes);
        scratch_size = scratch_block ? bytes : 0;
    }
    if (!scratch_block) {
        __atomic_store_n(&scratch_busy, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    *cached = 1;
    return scratch_block;
}

static void scratch_put(void *block, int cached) {
    if (cached)
        __atomic_store_n(&scratch_busy, 0, __ATOMIC_RELEASE);
    else
        free(block);
}

static int check_len(Py_buffer *b, Py_ssize_t nbytes, const char *name) {
    if (b->len != nbytes) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, nbytes, b->len);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(segment_scores_doc,
             "segment_scores(ids, lengths, B, T, h, vocab, schedule, segments, windows, pk0, pk1, levels, sizes,"
             " per_value, k0, k1, out, counts, nthreads, stride, seeded, sk0, sk1, read) -> scored token count\n\n"
             "ids int64[B*T], lengths int64[B], schedule int64[L-1], levels/sizes/per_value int64[ntables],\n"
             "k0/k1 int64[sum sizes] (key words), out float64 (zeroed): table t as [B, W, cells_t, C_t] one after\n"
             "the other (cells_t = 1 if per_value[t] else segments), counts int64[B*W*segments] (zeroed);\n"
             "seeded/sk0/sk1 int64[ntables]: spec v3 tables (seeded != 0) and their level key words;\n"
             "read int64[0] (no filter) or int64[6]: spec v5 read filter (front_tokens, front_public, public,\n"
             "depth, level, excerpt), segments must be 100; the count returned is then of the kept tokens.");

static PyObject *py_segment_scores(PyObject *self, PyObject *args) {
    Py_buffer ids, lengths, schedule, levels, sizes, per_value, k0, k1, out, counts, seeded, sk0, sk1, readf;
    Py_ssize_t B, T, h, vocab, segments, windows, stride;
    unsigned long long pk0, pk1;
    int nthreads;
    if (!PyArg_ParseTuple(args, "y*y*nnnny*nnKKy*y*y*y*y*w*w*iny*y*y*y*", &ids, &lengths, &B, &T, &h, &vocab,
                          &schedule, &segments, &windows, &pk0, &pk1, &levels, &sizes, &per_value, &k0, &k1, &out,
                          &counts, &nthreads, &stride, &seeded, &sk0, &sk1, &readf))
        return NULL;
    PyObject *result = NULL;
    int64_t *tok_row = NULL, *tok_pos = NULL, *seg = NULL, *win = NULL, *path = NULL, *table = NULL;
    int64_t *row_start = NULL, *koff = NULL, *ooff = NULL, *first = NULL;
    uint64_t *msg = NULL;
    int64_t *scratch = NULL;
    int scratch_cached = 0;
    int64_t nsched = schedule.len / 8, ntables = levels.len / 8, ctot = 0, ocells = 0;
    if (B < 0 || T < 0 || h < 1 || h > 16 || vocab < 1 || segments < 1 || windows < 1 || nsched > 62 ||
        stride < 0) {
        PyErr_SetString(PyExc_ValueError, "bad shape or parameter");
        goto done;
    }
    const int64_t *rd = readf.len ? (const int64_t *)readf.buf : NULL;
    if (readf.len && (readf.len != 6 * 8 || segments != 100 || rd[0] < 0 || rd[1] < 0 || rd[1] > 100 || rd[2] < 0 ||
                     rd[2] > 100 || rd[4] < 1 || rd[4] > rd[3])) {
        PyErr_SetString(PyExc_ValueError, "bad read filter");
        goto done;
    }
    if (!check_len(&ids, B * T * 8, "ids") || !check_len(&lengths, B * 8, "lengths") ||
        !check_len(&sizes, ntables * 8, "sizes") || !check_len(&per_value, ntables * 8, "per_value") ||
        !check_len(&seeded, ntables * 8, "seeded") || !check_len(&sk0, ntables * 8, "sk0") ||
        !check_len(&sk1, ntables * 8, "sk1"))
        goto done;
    koff = malloc((size_t)(ntables + 1) * sizeof(int64_t));
    ooff = malloc((size_t)(ntables + 1) * sizeof(int64_t));
    first = malloc((size_t)(ntables + 1) * sizeof(int64_t));
    if (!koff || !ooff || !first) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t SLICE = 256; /* candidates per work item */
    first[0] = 0;
    for (int64_t t = 0; t < ntables; t++) {
        int64_t lv = ((const int64_t *)levels.buf)[t], c = ((const int64_t *)sizes.buf)[t];
        int64_t pv = ((const int64_t *)per_value.buf)[t];
        if (lv < 1 || lv > nsched + 1 || c < 0) {
            PyErr_SetString(PyExc_ValueError, "table level outside 1..L or negative size");
            goto done;
        }
        koff[t] = ctot;
        ooff[t] = ocells;
        ctot += c;
        ocells += B * windows * (pv ? 1 : segments) * c;
        first[t + 1] = first[t] + (c + SLICE - 1) / SLICE;
    }
    for (int64_t l = 0; l < nsched; l++)
        if (((const int64_t *)schedule.buf)[l] < 1) {
            PyErr_SetString(PyExc_ValueError, "schedule entries must be >= 1");
            goto done;
        }
    if (!check_len(&k0, ctot * 8, "k0") || !check_len(&k1, ctot * 8, "k1") || !check_len(&out, ocells * 8, "out") ||
        !check_len(&counts, B * windows * segments * 8, "counts"))
        goto done;
    {
        const int64_t *pids = ids.buf, *plen = lengths.buf;
        int64_t maxn = B * (T > h ? T - h : 0), cap = 2;
        int nwords = (int)(h / 2 + 1);
        while (cap < 2 * (T > h ? T - h : 1)) cap <<= 1;
        /* all per-token arrays in one scratch block, 8-byte words */
        const size_t words = 4 * (size_t)(maxn + 1) + (size_t)(maxn * (nsched + 1) + 1) + (size_t)(maxn * nwords + 1) +
                             (size_t)(B + 1) + (size_t)cap + (size_t)(2 * maxn * ntables + 1);
        scratch = scratch_get(words * sizeof(int64_t), &scratch_cached);
        if (!scratch) {
            PyErr_NoMemory();
            goto done;
        }
        tok_row = scratch;
        tok_pos = tok_row + maxn + 1;
        seg = tok_pos + maxn + 1;
        win = seg + maxn + 1;
        path = win + maxn + 1;
        msg = (uint64_t *)(path + maxn * (nsched + 1) + 1);
        row_start = (int64_t *)(msg + maxn * nwords + 1);
        table = row_start + B + 1;
        uint64_t *tseed = (uint64_t *)(table + cap);
        Work w = {pids, B, T, h, vocab, segments, windows, nsched, ntables, schedule.buf, levels.buf, sizes.buf,
                  per_value.buf, stride, k0.buf, k1.buf, koff, (uint64_t)pk0, (uint64_t)pk1, 0, tok_row, tok_pos,
                  row_start, seg, win, path, msg, nwords, out.buf, ooff, SLICE, 0, first, 0,
                  seeded.buf, sk0.buf, sk1.buf, tseed, rd};
        int64_t n;
        Py_BEGIN_ALLOW_THREADS
        n = select_tokens(pids, plen, B, T, h, tok_row, tok_pos, table, cap);
        if (n < 0) goto unlock;
        w.n = n;
        int nt = nthreads < 1 ? 1 : (nthreads > 64 ? 64 : nthreads);
        /* Phase 2 starts a thread only for >= 1024 tokens of work: starting one costs ~100 us on a small VM,
           about 500 tokens' worth (a single ~220-token text was ~100 us slower with two threads than one). */
        int64_t per = n / 1024;
        int nt2 = per < nt ? (per > 0 ? (int)per : 1) : nt;
        parallel(&w, 2, nt2);
        if (rd) { /* spec v5: the level's tokens only, then their seeds */
            n = w.n = read_filter(&w);
            per = n / 1024;
            parallel(&w, 4, per < nt ? (per > 0 ? (int)per : 1) : nt);
        }
        for (int64_t r = 0, i = 0; r <= B; r++) {
            while (i < n && tok_row[i] < r) i++;
            row_start[r] = i;
        }
        /* window of each token: rank * windows / count in its row, without a divide per token */
        for (int64_t r = 0; r < B; r++) {
            const int64_t cnt = row_start[r + 1] - row_start[r];
            for (int64_t rank = 0, k = 0, acc = 0; rank < cnt; rank++, acc += windows) {
                while (acc >= (k + 1) * cnt) k++;
                win[row_start[r] + rank] = k;
            }
        }
        w.nitems = B * first[ntables];
        int nt3 = w.nitems < nt ? (int)(w.nitems > 0 ? w.nitems : 1) : nt;
        if (n * ctot < 4096) nt3 = 1; /* tiny problems: thread start-up costs more than the work */
        parallel(&w, 3, nt3);
        int64_t *pc = counts.buf;
        for (int64_t i = 0; i < n; i++) pc[(tok_row[i] * windows + win[i]) * segments + seg[i]] += 1;
    unlock:
        Py_END_ALLOW_THREADS
        if (n < 0)
            PyErr_SetString(PyExc_ValueError, "token ids must be in [0, 2^32)");
        else
            result = PyLong_FromLongLong(n);
    }
done:
    scratch_put(scratch, scratch_cached);
    free(koff);
    free(ooff);
    free(first);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&schedule);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&per_value);
    PyBuffer_Release(&k0);
    PyBuffer_Release(&k1);
    PyBuffer_Release(&out);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&seeded);
    PyBuffer_Release(&sk0);
    PyBuffer_Release(&sk1);
    PyBuffer_Release(&readf);
    return result;
}

PyDoc_STRVAR(scored_positions_doc,
             "scored_positions(ids, lengths, B, T, h, pk0, pk1, segments, row, pos, seg) -> scored token count n\n\n"
             "The scored positions of a right-padded batch (ids int64[B*T], lengths int64[B]; gpu/scoring.py's rule):\n"
             "row/pos int64[B*max(T-h, 0)] get each one's row and text index (rows in order, text order), seg the\n"
             "position segment (word 0 of its position stream under (pk0, pk1), times segments, >> 32; spec v5's\n"
             "lane with 100 segments). Entries from n on are left as they were.");

static PyObject *py_scored_positions(PyObject *self, PyObject *args) {
    Py_buffer ids, lengths, row, pos, seg;
    Py_ssize_t B, T, h, segments;
    unsigned long long pk0, pk1;
    if (!PyArg_ParseTuple(args, "y*y*nnnKKnw*w*w*", &ids, &lengths, &B, &T, &h, &pk0, &pk1, &segments, &row, &pos,
                          &seg))
        return NULL;
    PyObject *result = NULL;
    int64_t *table = NULL;
    const int64_t maxn = B * (T > h ? T - h : 0);
    if (B < 0 || T < 0 || h < 1 || h > 16 || segments < 1) {
        PyErr_SetString(PyExc_ValueError, "bad shape or parameter");
        goto done;
    }
    if (!check_len(&ids, B * T * 8, "ids") || !check_len(&lengths, B * 8, "lengths") ||
        !check_len(&row, maxn * 8, "row") || !check_len(&pos, maxn * 8, "pos") || !check_len(&seg, maxn * 8, "seg"))
        goto done;
    {
        int64_t cap = 2, n;
        while (cap < 2 * (T > h ? T - h : 1)) cap <<= 1;
        table = malloc((size_t)cap * sizeof(int64_t));
        if (!table) {
            PyErr_NoMemory();
            goto done;
        }
        int64_t *prow = row.buf, *ppos = pos.buf, *pseg = seg.buf;
        const int64_t *pids = ids.buf;
        Py_BEGIN_ALLOW_THREADS
        n = select_tokens(pids, lengths.buf, B, T, h, prow, ppos, table, cap);
        for (int64_t i = 0; i < n; i++) {
            const int64_t *ctx = pids + prow[i] * T + (ppos[i] - h);
            uint64_t msg[9], s0, s1;
            for (int64_t k = 0; k < h / 2; k++)
                msg[k] = ((uint64_t)ctx[2 * k] & 0xFFFFFFFFULL) | ((uint64_t)ctx[2 * k + 1] << 32);
            uint64_t last = (uint64_t)((4 * h) & 0xFF) << 56;
            if (h & 1) last |= (uint64_t)ctx[h - 1] & 0xFFFFFFFFULL;
            msg[h / 2] = last;
            siphash128((uint64_t)pk0, (uint64_t)pk1, msg, (int)(h / 2 + 1), &s0, &s1);
            pseg[i] = (int64_t)(((uint64_t)philox_word(s0, s1, 0) * (uint64_t)segments) >> 32);
        }
        Py_END_ALLOW_THREADS
        if (n < 0)
            PyErr_SetString(PyExc_ValueError, "token ids must be in [0, 2^32)");
        else
            result = PyLong_FromLongLong(n);
    }
done:
    free(table);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&row);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&seg);
    return result;
}

PyDoc_STRVAR(prf_seeds_doc,
             "prf_seeds(k0, k1, ctx, N, h, s0, s1): SipHash-2-4-128 seeds of N contexts (int64[N*h]) under\n"
             "per-row keys k0/k1 int64[N]; writes s0/s1 int64[N]. Used by the CPU sampler step.");

static PyObject *py_prf_seeds(PyObject *self, PyObject *args) {
    Py_buffer k0, k1, ctx, s0, s1;
    Py_ssize_t N, h;
    if (!PyArg_ParseTuple(args, "y*y*y*nnw*w*", &k0, &k1, &ctx, &N, &h, &s0, &s1)) return NULL;
    PyObject *result = NULL;
    if (N < 0 || h < 1 || h > 16) {
        PyErr_SetString(PyExc_ValueError, "bad N or h");
        goto done;
    }
    if (!check_len(&k0, N * 8, "k0") || !check_len(&k1, N * 8, "k1") || !check_len(&ctx, N * h * 8, "ctx") ||
        !check_len(&s0, N * 8, "s0") || !check_len(&s1, N * 8, "s1"))
        goto done;
    {
        const uint64_t *pk0 = k0.buf, *pk1 = k1.buf;
        const int64_t *pc = ctx.buf;
        uint64_t *o0 = s0.buf, *o1 = s1.buf, msg[10];
        for (Py_ssize_t n = 0; n < N; n++) {
            const int64_t *c = pc + n * h;
            for (Py_ssize_t i = 0; i < h / 2; i++)
                msg[i] = ((uint64_t)c[2 * i] & 0xFFFFFFFFULL) | ((uint64_t)c[2 * i + 1] << 32);
            uint64_t last = (uint64_t)((4 * h) & 0xFF) << 56;
            if (h & 1) last |= (uint64_t)c[h - 1] & 0xFFFFFFFFULL;
            msg[h / 2] = last;
            siphash128(pk0[n], pk1[n], msg, (int)(h / 2 + 1), &o0[n], &o1[n]);
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&k0);
    PyBuffer_Release(&k1);
    PyBuffer_Release(&ctx);
    PyBuffer_Release(&s0);
    PyBuffer_Release(&s1);
    return result;
}

PyDoc_STRVAR(philox_stream_doc,
             "philox_stream(s0, s1, N, n, out): stream words 0..n-1 of N seeds into int64[N*n].");

static PyObject *py_philox_stream(PyObject *self, PyObject *args) {
    Py_buffer s0, s1, out;
    Py_ssize_t N, n;
    if (!PyArg_ParseTuple(args, "y*y*nnw*", &s0, &s1, &N, &n, &out)) return NULL;
    PyObject *result = NULL;
    if (N < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "bad N or n");
        goto done;
    }
    if (!check_len(&s0, N * 8, "s0") || !check_len(&s1, N * 8, "s1") || !check_len(&out, N * n * 8, "out"))
        goto done;
    {
        const uint64_t *p0 = s0.buf, *p1 = s1.buf;
        int64_t *po = out.buf;
        Py_BEGIN_ALLOW_THREADS
        uint32_t w[4];
        for (Py_ssize_t r = 0; r < N; r++) /* one block per 4 words, not one block per word */
            for (Py_ssize_t j = 0; j < n; j += 4) {
                philox_block(p0[r], p1[r], (uint64_t)j >> 2, w);
                for (Py_ssize_t q = 0; q < 4 && j + q < n; q++) po[r * n + j + q] = (int64_t)w[q];
            }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&s0);
    PyBuffer_Release(&s1);
    PyBuffer_Release(&out);
    return result;
}

/* ---- generation: the fused sampling step (gpu/step.py has the contract) ------------------------------
 * One call per step for a whole batch: per row, the repeated-context check against the row's log of
 * packed h-gram words (appended in place), the position segment, the payload's level values, one seed per
 * level (`level_seed`: the spec-version branch; a later version adds its case there), routing over chunk
 * masses with Philox Gumbel noise, Gumbel-max over the logits inside the chosen chunk; unmarked rows draw
 * from the same distribution by inverse CDF with the caller's uniform. Float work is float64.
 * Spec v5 (position-multiplexed levels, docs/spec.md section 19; `v5_level`): no routing (nsched 0); the
 * position's lane q = (word 0 of its position stream * 100) >> 32 and the slot's generated count before this
 * step pick ONE level l, whose seed alone is derived (v3's construction) from segment 0's whole value, and the
 * token is a Gumbel-max over the whole vocabulary (word j = token id j). */

typedef struct {
    const void *logits;
    int dbl; /* logits are float64 (else float32) */
    int64_t B, V, h, K, L, C, nsched, segments, stride, spec, cap, nw;
    const int64_t *ctx, *payload, *schedule, *slots;
    int64_t nslots;
    const uint64_t *k0, *k1;
    uint64_t pk0, pk1;
    int64_t *generated, *counts, *out, *marks;
    uint64_t *seen;
    const double *rand;
    int err;
    const uint64_t *sk0, *sk1; /* spec v3: each level's SipHash key (NULL otherwise) */
    int64_t front, front_public, public_; /* spec v5: public share of lanes (percent) before/after the front */
} Step;

static inline double logit_at(const Step *s, int64_t b, int64_t t) {
    return s->dbl ? ((const double *)s->logits)[b * s->V + t] : (double)((const float *)s->logits)[b * s->V + t];
}

/* Token at routing position y (inverse of `interleave`). */
static inline int64_t deinterleave(int64_t y, int64_t vocab, int64_t stride) {
    if (stride <= 0) return y;
    int64_t a = vocab / stride, r = vocab - a * stride, c, q;
    if (y < r * (a + 1)) {
        c = y / (a + 1);
        q = y - c * (a + 1);
    } else {
        int64_t yt = y - r * (a + 1), am = a > 0 ? a : 1;
        c = r + yt / am;
        q = yt - (c - r) * am;
    }
    return q * stride + c;
}

/* Seed of level l for this context and entry (k0, k1): the spec-version branch of the PRF construction.
 * v1/v2: SipHash under the entry key. v3 (spec section 15), v4 and v5: one SipHash per token and level under the
 * level key, XOR the entry's value key. */
static inline int level_seed(const Step *s, int64_t l, uint64_t k0, uint64_t k1, const uint64_t *msg, uint64_t *lo,
                             uint64_t *hi) {
    switch (s->spec) {
    case 1:
    case 2:
        siphash128(k0, k1, msg, (int)s->nw, lo, hi);
        return 1;
    case 3:
    case 4: /* spec v4 keeps v3's construction (docs/spec.md section 18) */
    case 5: /* spec v5 too (section 19): only the level it draws under differs */
        if (!s->sk0) return 0;
        siphash128(s->sk0[l], s->sk1[l], msg, (int)s->nw, lo, hi);
        *lo ^= k0;
        *hi ^= k1;
        return 1;
    default:
        return 0;
    }
}

static inline double gumbel_of(uint32_t u) { return -log(-log(((double)u + 0.5) * (1.0 / 4294967296.0))); }

/* Returns 1 when the row draws a watermarked token; appends a new continuation context to its log. */
static int step_mark(Step *s, int64_t b, const uint64_t *msg) {
    if (s->generated[b] < s->h) return s->spec < 2;
    uint64_t *log_ = s->seen + b * s->cap * s->nw;
    int64_t n = s->counts[b];
    for (int64_t e = 0; e < n; e++) {
        const uint64_t *w = log_ + e * s->nw;
        int64_t i = 0;
        while (i < s->nw && w[i] == msg[i]) i++;
        if (i == s->nw) return 0;
    }
    if (n >= s->cap) {
        s->err = 2;
        return 0;
    }
    memcpy(log_ + n * s->nw, msg, (size_t)s->nw * 8);
    s->counts[b] = n + 1;
    return 1;
}

/* ---- the step's fast path: chunk masses from a vectorised exp, each decision checked against its margin ----
 * The exact path computes exp(x - max) with libm over the whole vocabulary (every chunk mass needs every
 * probability): most of a step's time. The fast path computes the same masses with a branch-free exp that the
 * compiler vectorises (relative error < 1e-14 on [-708, 0]; below -708, and for -inf/NaN, 0), sums them in any
 * order, and takes a routing decision only when its best score leads the runner-up by more than fast_margin.
 * Both paths' scores are within ~(2e-14 + 4 V 2^-53) of the true log-masses, far below the margin, so a decision
 * taken here is the exact path's decision; a closer one (probability ~1e-7 per decision) sends the row back to
 * the exact path. Denormal masses (flushed to 0 here) score below -680 and never win: the largest chunk scores
 * at least -log(k) - 3.2. Same tokens as the exact path by construction; tests compare both on random batches.
 * The masses come from one fused pass over the logits (`range_mass`), and on x86 with AVX2 + FMA a float32 tier
 * goes first for contiguous float32 logits (error 1e-5, margin 1e-4; a decision it cannot take goes on to the
 * double tier, then to the exact path): the routing tiers below. */
static int step_fast_enabled = 1;   /* fast_step(False): the exact path only (tests, benchmarks) */
static double fast_margin = 1e-7;   /* fast_step(True, m): tests widen it to send every decision back */

/* Four running sums (a vector's lanes), combined at the end. */
static inline double sum4(const double *p, int64_t n) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        a0 += p[j];
        a1 += p[j + 1];
        a2 += p[j + 2];
        a3 += p[j + 3];
    }
    for (; j < n; j++) a0 += p[j];
    return (a0 + a1) + (a2 + a3);
}

/* MADD(a, b, c) = a * b + c: one fused rounding where the path has FMA (more accurate, fewer instructions), two
 * roundings in the generic path; the error bound below holds for both. */
#define FEXP_BODY(MADD)                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                                     \
        double x = p[i];                                                                                  \
        int ok = x >= -708.0; /* false for -inf and NaN */                                                \
        double xc = ok ? x : 0.0;                                                                         \
        double kd = MADD(xc, 1.4426950408889634, 6755399441055744.0); /* 1.5 * 2^52: round to nearest */  \
        int64_t kb;                                                                                       \
        memcpy(&kb, &kd, 8);                                                                              \
        kd -= 6755399441055744.0;                                                                         \
        double r = MADD(-kd, 1.90821492927058770002e-10, MADD(-kd, 6.93147180369123816490e-01, xc));     \
        /* Taylor to degree 11 in Estrin's scheme: a short dependency chain, so the vector units stay busy */ \
        double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;                                                    \
        double a0 = 1.0 + r, a1 = MADD(r, 1.0 / 6.0, 0.5), a2 = MADD(r, 1.0 / 120.0, 1.0 / 24.0);         \
        double a3 = MADD(r, 1.0 / 5040.0, 1.0 / 720.0), a4 = MADD(r, 1.0 / 362880.0, 1.0 / 40320.0);      \
        double a5 = MADD(r, 1.0 / 39916800.0, 1.0 / 3628800.0);                                           \
        double q = MADD(MADD(a5, r2, a4), r8, MADD(MADD(a3, r2, a2), r4, MADD(a1, r2, a0)));              \
        int64_t sb = ((kb - (int64_t)0x4338000000000000LL) + 1023) << 52;                                 \
        double scale;                                                                                     \
        memcpy(&scale, &sb, 8);                                                                           \
        p[i] = ok ? q * scale : 0.0;                                                                      \
    }
#define MADD_SPLIT(a, b, c) ((a) * (b) + (c))
#define MADD_FUSED(a, b, c) __builtin_fma((a), (b), (c))

/* no-trapping-math: lets GCC turn the selects into vector blends (no FP exception is ever inspected here) */
#define FEXP_FN __attribute__((optimize("no-trapping-math")))

/* The row's largest logit (NaN and -inf never win, as in the exact scan: max is exact in any order). */
#define ROW_MAX_BODY(T)                                                                                   \
    T m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;                                     \
    int64_t j = 0;                                                                                        \
    for (; j + 4 <= n; j += 4) {                                                                          \
        m0 = x[j] > m0 ? x[j] : m0;                                                                       \
        m1 = x[j + 1] > m1 ? x[j + 1] : m1;                                                               \
        m2 = x[j + 2] > m2 ? x[j + 2] : m2;                                                               \
        m3 = x[j + 3] > m3 ? x[j + 3] : m3;                                                               \
    }                                                                                                     \
    for (; j < n; j++) m0 = x[j] > m0 ? x[j] : m0;                                                        \
    m0 = m1 > m0 ? m1 : m0;                                                                               \
    m2 = m3 > m2 ? m3 : m2;                                                                               \
    return (double)(m2 > m0 ? m2 : m0);

/* p[i] = x[i] - mx for a contiguous run (the identity layout, or one column of an interleaved one) */
#define SHIFT_BODY                                                                                        \
    if (st == 1)                                                                                          \
        for (int64_t i = 0; i < n; i++) p[i] = (double)x[i] - mx;                                         \
    else                                                                                                  \
        for (int64_t i = 0; i < n; i++) p[i] = (double)x[i * st] - mx;

/* The fused pass: the sum of exp(x[i * st] - mx) over a run of n logits, a block at a time through an L1-sized
 * buffer (shift, fast exp, sum), so the logits are read once and no row-sized buffer is written or read back.
 * A contiguous block whose every logit lies more than FAST_FLOOR below the row's max (a top-k / top-p warp leaves
 * almost all of them at -inf) adds nothing: it is skipped. That changes a mass by at most n e^-FLOOR, relative
 * error < 1e-20 for every chunk that can come within the margin of winning (its log-mass is at least
 * -log(K) - 26.1: the largest chunk holds >= 1/K of a total >= 1 and Gumbel terms lie in [-3.2, 22.9]). */
#define EXP_BLOCK 512
#define FAST_FLOOR 100.0
#define EXP_SUM_BODY(ISA, T)                                                                              \
    double buf[EXP_BLOCK], total = 0.0;                                                                   \
    for (int64_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {                                                       \
        int64_t m = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;                                              \
        if (st == 1 && !(row_max_##T##_##ISA(x + i0, m) - mx >= -FAST_FLOOR)) continue;                   \
        shift_##T##_##ISA(buf, x + i0 * st, m, st, mx);                                                   \
        fast_exp_##ISA(buf, m);                                                                           \
        total += sum4(buf, m);                                                                            \
    }                                                                                                     \
    return total;

FEXP_FN static void fast_exp_generic(double *p, int64_t n) { FEXP_BODY(MADD_SPLIT) }
FEXP_FN static double row_max_f_generic(const float *x, int64_t n) { ROW_MAX_BODY(float) }
FEXP_FN static double row_max_d_generic(const double *x, int64_t n) { ROW_MAX_BODY(double) }
static void shift_f_generic(double *p, const float *x, int64_t n, int64_t st, double mx) { SHIFT_BODY }
static void shift_d_generic(double *p, const double *x, int64_t n, int64_t st, double mx) { SHIFT_BODY }
static double exp_sum_f_generic(const float *x, int64_t n, int64_t st, double mx) { EXP_SUM_BODY(generic, f) }
static double exp_sum_d_generic(const double *x, int64_t n, int64_t st, double mx) { EXP_SUM_BODY(generic, d) }
#if HERO_X86
/* The fast path's AVX2 variants also use FMA (every AVX2 CPU made has it; checked at import, `fast_fma`). The
 * decode kernels above never do: their sums are the spec's, rounding for rounding. */
#define FAST_FN __attribute__((target("avx2,fma")))
/* max with _mm256_max_ps(x, m) = x > m ? x : m lane by lane: NaN never wins, as in the scalar scan */
#define ROW_MAX_VEC(T, W, VT, LOAD, MAX, SET1, STORE)                                                     \
    VT m0 = SET1(-INFINITY), m1 = m0;                                                                     \
    int64_t j = 0;                                                                                        \
    for (; j + 2 * W <= n; j += 2 * W) {                                                                  \
        m0 = MAX(LOAD(x + j), m0);                                                                        \
        m1 = MAX(LOAD(x + j + W), m1);                                                                    \
    }                                                                                                     \
    T lanes[W], mx = -INFINITY;                                                                           \
    STORE(lanes, MAX(m0, m1));                                                                            \
    for (int k = 0; k < W; k++) mx = lanes[k] > mx ? lanes[k] : mx;                                       \
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;                                                        \
    return (double)mx;
FEXP_FN FAST_FN static void fast_exp_avx2(double *p, int64_t n) { FEXP_BODY(MADD_FUSED) }
FAST_FN static double row_max_f_avx2(const float *x, int64_t n) {
    ROW_MAX_VEC(float, 8, __m256, _mm256_loadu_ps, _mm256_max_ps, _mm256_set1_ps, _mm256_storeu_ps)
}
FAST_FN static double row_max_d_avx2(const double *x, int64_t n) {
    ROW_MAX_VEC(double, 4, __m256d, _mm256_loadu_pd, _mm256_max_pd, _mm256_set1_pd, _mm256_storeu_pd)
}
FAST_FN static void shift_f_avx2(double *p, const float *x, int64_t n, int64_t st, double mx) { SHIFT_BODY }
FAST_FN static void shift_d_avx2(double *p, const double *x, int64_t n, int64_t st, double mx) { SHIFT_BODY }
FAST_FN static double exp_sum_f_avx2(const float *x, int64_t n, int64_t st, double mx) { EXP_SUM_BODY(avx2, f) }
FAST_FN static double exp_sum_d_avx2(const double *x, int64_t n, int64_t st, double mx) { EXP_SUM_BODY(avx2, d) }

/* The float32 tier: contiguous float32 logits, eight lanes in single precision (about three times the double
 * pass's speed). Its mass is within F32_ERROR (relative) of the true one: d = x - mx rounded once in float
 * (|d| <= 87, else the lane is 0: 87 * 2^-24), exp to degree 7 (< 4 * 2^-24), 64 terms summed per float lane per
 * block (63 * 2^-24); every routing decision it takes leads by F32_MARGIN, more than twice that, else the row
 * goes on to the double tier. Terms below e^-87 are dropped: the bound for FAST_FLOOR above covers them. */
#define F32_ERROR 1e-5
#define F32_MARGIN 1e-4
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 exp8f_avx2(__m256 d) {
    const __m256 shifter = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23: round to nearest */
    __m256 ok = _mm256_cmp_ps(d, _mm256_set1_ps(-87.0f), _CMP_GE_OQ); /* false for -inf and NaN */
    __m256 dc = _mm256_and_ps(d, ok);
    __m256 kf = _mm256_fmadd_ps(dc, _mm256_set1_ps(1.44269504088896341f), shifter);
    __m256i kb = _mm256_castps_si256(kf);
    kf = _mm256_sub_ps(kf, shifter);
    __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693359375f), dc); /* ln 2 in two parts (Cody-Waite) */
    r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 q = _mm256_set1_ps(1.0f / 5040.0f);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 720.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 120.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 24.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 6.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.5f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
    __m256i sb = _mm256_slli_epi32(_mm256_add_epi32(kb, _mm256_set1_epi32(127 - 0x4B400000)), 23);
    return _mm256_and_ps(_mm256_mul_ps(q, _mm256_castsi256_ps(sb)), ok);
}

/* The last (< 8) logits of a float32 pass's block, through the double pass */
static inline __attribute__((always_inline, target("avx2,fma"))) double tail_mass_avx2(const float *x, int64_t n,
                                                                                      double mx) {
    double buf[8];
    shift_f_avx2(buf, x, n, 1, mx);
    fast_exp_avx2(buf, n);
    return sum4(buf, n);
}

FAST_FN static double exp_sum_f32_avx2(const float *x, int64_t n, double mx) {
    const __m256 m = _mm256_set1_ps((float)mx); /* mx is a float32 logit: exact */
    __m256d acc = _mm256_setzero_pd();
    double total = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        int64_t len = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK, i = 0;
        const float *xb = x + i0;
        if (!(row_max_f_avx2(xb, len) - mx >= -FAST_FLOOR)) continue;
        __m256 a = _mm256_setzero_ps();
        for (; i + 8 <= len; i += 8) a = _mm256_add_ps(a, exp8f_avx2(_mm256_sub_ps(_mm256_loadu_ps(xb + i), m)));
        acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                                               _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))));
        if (i < len) total += tail_mass_avx2(xb + i, len - i, mx);
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, acc);
    return total + (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}
static int fast_fma = 0; /* set at import: this CPU has AVX2 and FMA */
#define FAST_CALL(name, ...) (isa->needs >= 1 && fast_fma ? name##_avx2(__VA_ARGS__) : name##_generic(__VA_ARGS__))
#else
#define FAST_CALL(name, ...) name##_generic(__VA_ARGS__)
#endif

static double row_max(const Step *s, int64_t b) {
    return s->dbl ? FAST_CALL(row_max_d, (const double *)s->logits + b * s->V, s->V)
                  : FAST_CALL(row_max_f, (const float *)s->logits + b * s->V, s->V);
}

/* p[y] = logit - mx in routing order (the inverse of `interleave`, walked column by column: no divisions) */
static void gather_routed(const Step *s, int64_t b, double mx, double *p) {
    const int64_t V = s->V, st = s->stride;
    int64_t a = st > 0 ? V / st : V, r = st > 0 ? V - a * st : 0, cols = st > 0 ? st : 1, y = 0;
    for (int64_t c = 0; c < cols; c++) {
        int64_t len = c < r ? a + 1 : a, step = st > 0 ? st : 1;
        if (s->dbl)
            FAST_CALL(shift_d, p + y, (const double *)s->logits + b * V + c, len, step, mx);
        else
            FAST_CALL(shift_f, p + y, (const float *)s->logits + b * V + c, len, step, mx);
        y += len;
    }
}

/* Routing tiers, fastest first: each decision is taken by the first tier whose scores lead by its margin. */
#define TIER_EXACT 0 /* the spec's arithmetic: libm exp, sequential sums */
#define TIER_F64 1   /* the fused double pass (fast_exp: relative error < 1e-14), margin fast_margin */
#define TIER_F32 2   /* the float32 pass (AVX2 + FMA, contiguous float32 logits), margin F32_MARGIN */

static int f32_tier(const Step *s) {
#if HERO_X86
    return !s->dbl && s->stride <= 0 && isa->needs >= 1 && fast_fma;
#else
    (void)s;
    return 0;
#endif
}

/* The fast path's mass of routing positions [y0, y1) of row b, sum of exp(logit - mx): one run of the identity
 * layout, or one strided run per column of an interleaved one that the range crosses. */
static double range_mass(const Step *s, int64_t b, int64_t y0, int64_t y1, double mx, int tier) {
    const int64_t V = s->V, st = s->stride;
#if HERO_X86
    if (tier == TIER_F32) return exp_sum_f32_avx2((const float *)s->logits + b * V + y0, y1 - y0, mx);
#endif
    if (st <= 0) {
        return s->dbl ? FAST_CALL(exp_sum_d, (const double *)s->logits + b * V + y0, y1 - y0, 1, mx)
                      : FAST_CALL(exp_sum_f, (const float *)s->logits + b * V + y0, y1 - y0, 1, mx);
    }
    int64_t a = V / st, r = V - a * st, y = 0;
    double total = 0.0;
    for (int64_t c = 0; c < st && y < y1; c++) {
        int64_t len = c < r ? a + 1 : a, from = y0 > y ? y0 : y, to = y1 < y + len ? y1 : y + len;
        if (to > from) {
            int64_t at = b * V + c + (from - y) * st;
            total += s->dbl ? FAST_CALL(exp_sum_d, (const double *)s->logits + at, to - from, st, mx)
                            : FAST_CALL(exp_sum_f, (const float *)s->logits + at, to - from, st, mx);
        }
        y += len;
    }
    return total;
}

/* Level routing of a marked row; `exact` = the spec's own arithmetic (p from libm exp, sequential sums, scores
 * log(mass / total)), else the fast path's fused masses (`range_mass`; p and total unused) scored log(mass): the
 * same score less a constant shared by every chunk, which moves no argmax and no margin. Returns 0 when a fast
 * decision is too close to call. */
static int route_levels(const Step *s, int64_t b, const double *p, double mx, double total, const uint64_t *lo,
                        const uint64_t *hi, int tier, int64_t *offset_out, int64_t *size_out) {
    const int exact = tier == TIER_EXACT;
    const double margin = tier == TIER_F32 && fast_margin < F32_MARGIN ? F32_MARGIN : fast_margin;
    int64_t offset = 0, size = s->V;
    for (int64_t l = 0; l < s->nsched; l++) {
        int64_t k = s->schedule[l], a = size / k, small = k - (size - a * k), best_i = 0, pos = offset;
        double best = -INFINITY, second = -INFINITY;
        uint32_t w[4];
        for (int64_t i = 0; i < k; i++) {
            int64_t len = i < small ? a : a + 1;
            double m = 0.0;
            if (exact)
                for (int64_t j = 0; j < len; j++) m += p[pos + j];
            else
                m = range_mass(s, b, pos, pos + len, mx, tier);
            pos += len;
            if ((i & 3) == 0) philox_block(lo[l], hi[l], (uint64_t)i >> 2, w);
            if (m > 0.0) {
                double sc = (exact ? log(m / total) : log(m)) + gumbel_of(w[i & 3]);
                if (sc > best) {
                    second = best;
                    best = sc;
                    best_i = i;
                } else if (sc > second) {
                    second = sc;
                }
            }
        }
        if (!exact && !(best - second > margin)) return 0;
        int64_t start = best_i <= small ? best_i * a : small * a + (best_i - small) * (a + 1);
        offset += start;
        size = best_i < small ? a : a + 1;
    }
    *offset_out = offset;
    *size_out = size;
    return 1;
}

/* An unmarked row samples the softmax with fresh randomness (not a keyed draw, so fast probabilities serve as they
 * are): inverse CDF over blocks of routing positions (fused masses, kept in p; the float32 tier's where it runs,
 * within 1e-5 of the true ones: the float32 softmax precision the torch backend samples with), then inside the
 * block the draw lands in (the double fast exp). Same order and distribution as the exact scan, one read of the row. */
#define DRAW_BLOCK 1024
static int64_t draw_fast(const Step *s, int64_t b, double mx, double *p) {
    const int64_t V = s->V, nb = (V + DRAW_BLOCK - 1) / DRAW_BLOCK;
    const int tier = f32_tier(s) ? TIER_F32 : TIER_F64;
    double total = 0.0;
    for (int64_t k = 0; k < nb; k++) {
        int64_t y0 = k * DRAW_BLOCK, y1 = y0 + DRAW_BLOCK < V ? y0 + DRAW_BLOCK : V;
        p[k] = range_mass(s, b, y0, y1, mx, tier);
        total += p[k];
    }
    double target = s->rand[b] * total, acc = 0.0;
    int64_t k = 0, lastk = 0;
    for (; k < nb; k++) {
        if (p[k] > 0.0) {
            lastk = k;
            if (acc + p[k] > target) break;
            acc += p[k];
        }
    }
    if (k == nb) { /* rounding left the target past the last block: its last token, as the exact scan does */
        k = lastk;
        target = INFINITY;
    }
    int64_t y0 = k * DRAW_BLOCK, n = y0 + DRAW_BLOCK < V ? DRAW_BLOCK : V - y0, y = 0, lasty = 0;
    double q[DRAW_BLOCK];
    for (int64_t j = 0; j < n; j++) q[j] = logit_at(s, b, deinterleave(y0 + j, V, s->stride)) - mx;
    FAST_CALL(fast_exp, q, n);
    for (; y < n; y++) {
        if (q[y] > 0.0) {
            lasty = y;
            acc += q[y];
            if (acc > target) break;
        }
    }
    return deinterleave(y0 + (y < n ? y : lasty), V, s->stride);
}

/* ---- the fast Gumbel-max: the last draw of a marked row (spec v5: the whole vocabulary) ----------------------
 * The exact loop computes G(u) = -log(-log((u + 0.5) 2^-32)) with two libm logs per token: 30-50 ns each, most of
 * a v5 step. Here the Philox words come 4 blocks at a time (`philox_x4`, vectorised over blocks) and G from a
 * branch-free log (`fast_log`: x = m 2^k, m in [sqrt(1/2), sqrt(2)), f = m - 1 exact, s = f / (2 + f),
 * log m = 2 atanh(s) by Taylor to s^21: |s| <= 0.1716, truncation < s^23 / 23 < 1e-19 relative; s is within 2
 * roundings, log m within 4 ulp, k ln2 split (ln2_hi has 11 trailing zero bits: k ln2_hi exact), so log x is
 * within 5e-16 |log x| + 2^-52 |k ln2| of the truth). Inner log: E = -log U within 6 ulp; outer: G within
 * 6 ulp of E's effect (|dG| = |dE| / E < 2e-15) plus 23 * 1e-15: |G_fast - G_true| < 1e-13, and libm's G is within
 * 2 ulp of its inputs' logs, < 1e-13 too: the tests check |G_fast - G_libm| < 1e-12 over extreme and random u.
 * Score a_j = (x_j - mx) + G_fast, the same subtraction as the exact loop; tokens with x - mx < -1000 are left out
 * (their exact score < -976 never beats the row's best, which must then be > -900, else the row goes back), so
 * every kept score has |score| < 1024 and |a_j - e_j| < 2e-13 + 2^-42 < 1e-12 (e_j: the exact loop's score). A
 * token with (x - mx) + gmax < best - margin (best so far, gmax >= any G) is skipped before its Philox block, as
 * the exact loop skips it. The draw is taken only when the best score leads the runner-up by more than
 * fast_margin (>= 1e-7 >> 2e-12): then the exact loop picks the same token (no tie either); closer calls
 * (probability ~1e-7 per row) go back to the exact loop. */
#define GUMBEL_TILE 256
/* MADD as for FEXP_BODY; log of p[i] > 0 finite, normal (every U and E here is in [2^-33, 23]) */
#define FLOG_BODY(MADD)                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                                     \
        double x = p[i];                                                                                  \
        uint64_t bits, kb, mb;                                                                            \
        memcpy(&bits, &x, 8);                                                                             \
        /* kb = k + 1024 with m = x 2^-k in [sqrt(1/2), sqrt(2)): logical shifts and no int64 -> double      \
         * conversion, both missing from AVX2 */                                                          \
        kb = (bits - 0x3FE6A09E667F3BCDULL + (1024ULL << 52)) >> 52;                                      \
        mb = bits - (kb << 52) + (1024ULL << 52);                                                         \
        kb |= 0x4330000000000000ULL; /* the double 2^52 + kb */                                           \
        double m, kd;                                                                                     \
        memcpy(&m, &mb, 8);                                                                               \
        memcpy(&kd, &kb, 8);                                                                              \
        kd -= 4503599627371520.0; /* 2^52 + 1024: k, exactly */                                           \
        double f = m - 1.0, s = f / (2.0 + f), z = s * s;                                                 \
        double t = MADD(z, 1.0 / 21.0, 1.0 / 19.0);                                                       \
        t = MADD(t, z, 1.0 / 17.0);                                                                       \
        t = MADD(t, z, 1.0 / 15.0);                                                                       \
        t = MADD(t, z, 1.0 / 13.0);                                                                       \
        t = MADD(t, z, 1.0 / 11.0);                                                                       \
        t = MADD(t, z, 1.0 / 9.0);                                                                        \
        t = MADD(t, z, 1.0 / 7.0);                                                                        \
        t = MADD(t, z, 1.0 / 5.0);                                                                        \
        t = MADD(t, z, 1.0 / 3.0);                                                                        \
        double lm = MADD(2.0 * s, t * z, 2.0 * s); /* 2 s (1 + z t) */                                    \
        p[i] = MADD(kd, 6.93147180369123816490e-01, MADD(kd, 1.90821492927058770002e-10, lm));            \
    }
/* G for n words: g[i] = -log(-log((u[i] + 0.5) 2^-32)) */
#define FGUMBEL_BODY(ISA)                                                                                 \
    for (int64_t i = 0; i < n; i++) g[i] = ((double)u[i] + 0.5) * (1.0 / 4294967296.0);                   \
    fast_log_##ISA(g, n);                                                                                 \
    for (int64_t i = 0; i < n; i++) g[i] = -g[i];                                                         \
    fast_log_##ISA(g, n);                                                                                 \
    for (int64_t i = 0; i < n; i++) g[i] = -g[i];
/* Philox4x32-10 blocks blk .. blk + 3 of seed (s0, s1), four lanes (one block each): out[4 l + w] = word w of block
 * blk + l. The 32-bit products in 64-bit lanes (vpmuludq on AVX2). */
#define PHILOX_X4_BODY                                                                                    \
    const v4u m32 = {0xFFFFFFFFULL, 0xFFFFFFFFULL, 0xFFFFFFFFULL, 0xFFFFFFFFULL};                         \
    v4u b4 = {blk, blk + 1, blk + 2, blk + 3};                                                            \
    v4u cc0 = b4 & m32, cc1 = b4 >> 32, cc2 = m32 & (s1 & 0xFFFFFFFFULL), cc3 = m32 & (s1 >> 32);         \
    v4u kk0 = m32 & (s0 & 0xFFFFFFFFULL), kk1 = m32 & (s0 >> 32);                                         \
    for (int q = 0; q < 10; q++) {                                                                        \
        v4u p0 = cc0 * 0xD2511F53ULL;                                                                     \
        v4u p1 = cc2 * 0xCD9E8D57ULL;                                                                     \
        cc0 = (p1 >> 32) ^ cc1 ^ kk0;                                                                     \
        cc1 = p1 & m32;                                                                                   \
        cc2 = (p0 >> 32) ^ cc3 ^ kk1;                                                                     \
        cc3 = p0 & m32;                                                                                   \
        kk0 = (kk0 + 0x9E3779B9ULL) & m32;                                                                \
        kk1 = (kk1 + 0xBB67AE85ULL) & m32;                                                                \
    }                                                                                                     \
    for (int l = 0; l < 4; l++) {                                                                         \
        out[4 * l] = (uint32_t)cc0[l];                                                                    \
        out[4 * l + 1] = (uint32_t)cc1[l];                                                                \
        out[4 * l + 2] = (uint32_t)cc2[l];                                                                \
        out[4 * l + 3] = (uint32_t)cc3[l];                                                                \
    }

FEXP_FN static void fast_log_generic(double *p, int64_t n) { FLOG_BODY(MADD_SPLIT) }
/* How many of dt[0 .. m) reach thr (NaN does not) */
#define LIVE_BODY                                                                                         \
    int64_t c = 0;                                                                                        \
    for (int64_t i = 0; i < m; i++) c += dt[i] >= thr;                                                    \
    return c;
/* A dense tile's filter with no log (see gumbel_max_fast): keep[i] = 1.0 for a token that reaches thr and whose
 * 1 - U <= exp(min(d - bm, 0)) (1 + 1e-6), bm = best - margin; returns their count. 1 - U = (2^32 - 1/2 - u) 2^-32,
 * u as a signed int (AVX2 converts no unsigned ints): exact. */
#define FILTER_BODY(ISA)                                                                                  \
    for (int64_t i = 0; i < m; i++) {                                                                     \
        double t = dt[i] - bm;                                                                            \
        keep[i] = t < 0.0 ? t : 0.0; /* NaN: 0, failed by thr */                                          \
    }                                                                                                     \
    fast_exp_##ISA(keep, m);                                                                              \
    int64_t c = 0;                                                                                        \
    for (int64_t i = 0; i < m; i++) {                                                                     \
        const double v = (2147483647.5 - (double)(int32_t)(words[i] ^ 0x80000000u)) * (1.0 / 4294967296.0); \
        const int ok = (dt[i] >= thr) & (v <= keep[i] * (1.0 + 1e-6));                                   \
        keep[i] = ok ? 1.0 : 0.0;                                                                         \
        c += ok;                                                                                          \
    }                                                                                                     \
    return c;
FEXP_FN static int64_t live_count_generic(const double *dt, int64_t m, double thr) { LIVE_BODY }
FEXP_FN static int64_t gumbel_filter_generic(const double *dt, const uint32_t *words, int64_t m, double bm,
                                             double thr, double *keep) { FILTER_BODY(generic) }

static void fast_gumbel_generic(const uint32_t *u, double *g, int64_t n) { FGUMBEL_BODY(generic) }
/* blocks blk .. blk + 4 n4 - 1 into out[0 .. 16 n4) */
static void philox_tile_generic(uint64_t s0, uint64_t s1, uint64_t blk, int64_t n4, uint32_t *out) {
    for (int64_t g = 0; g < n4; g++, blk += 4, out += 16) {
#if HERO_VEC
        PHILOX_X4_BODY
#else
        for (int l = 0; l < 4; l++) philox_block(s0, s1, blk + (uint64_t)l, out + 4 * l);
#endif
    }
}
#if HERO_X86
FEXP_FN FAST_FN static void fast_log_avx2(double *p, int64_t n) { FLOG_BODY(MADD_FUSED) }
FAST_FN static void fast_gumbel_avx2(const uint32_t *u, double *g, int64_t n) { FGUMBEL_BODY(avx2) }
FEXP_FN FAST_FN static int64_t live_count_avx2(const double *dt, int64_t m, double thr) { LIVE_BODY }
/* AVX-512 (isa 'avx512'): eight blocks per vector, blocks blk .. blk + 8 n8 - 1 into out[0 .. 32 n8) */
AVX512_FN static void philox_tile_avx512(uint64_t s0, uint64_t s1, uint64_t blk, int64_t n8, uint32_t *out) {
    __m512i k0[10], k1[10];
    uint32_t a = (uint32_t)s0, c = (uint32_t)(s0 >> 32);
    for (int q = 0; q < 10; q++, a += 0x9E3779B9U, c += 0xBB67AE85U) {
        k0[q] = _mm512_set1_epi64(a);
        k1[q] = _mm512_set1_epi64(c);
    }
    const __m512i m32 = _mm512_set1_epi64(0xFFFFFFFFLL), M0 = _mm512_set1_epi64(0xD2511F53LL),
                  M1 = _mm512_set1_epi64(0xCD9E8D57LL), c2i = _mm512_set1_epi64((uint32_t)s1),
                  c3i = _mm512_set1_epi64((uint32_t)(s1 >> 32)), step = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
                  ilo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), ihi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    for (int64_t g = 0; g < n8; g++, blk += 8, out += 32) {
        __m512i b8 = _mm512_add_epi64(_mm512_set1_epi64((long long)blk), step);
        __m512i cc0 = b8, cc1 = _mm512_srli_epi64(b8, 32), cc2 = c2i, cc3 = c3i;
        for (int q = 0; q < 10; q++) {
            __m512i p0 = _mm512_mul_epu32(cc0, M0), p1 = _mm512_mul_epu32(cc2, M1);
            cc0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), cc1), k0[q]);
            cc2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), cc3), k1[q]);
            cc1 = p1;
            cc3 = p0;
        }
        __m512i A = _mm512_or_si512(_mm512_and_si512(cc0, m32), _mm512_slli_epi64(cc1, 32));
        __m512i B = _mm512_or_si512(_mm512_and_si512(cc2, m32), _mm512_slli_epi64(cc3, 32));
        _mm512_storeu_si512((void *)out, _mm512_permutex2var_epi64(A, ilo, B));
        _mm512_storeu_si512((void *)(out + 16), _mm512_permutex2var_epi64(A, ihi, B));
    }
}
/* AVX2 + FMA: the filter's exp in float32, eight lanes (exp8f_avx2, above: relative error < F32_ERROR after the
 * argument's rounding to float; 0 below -87, where exp < 2^-33 <= 1 - U fails anyway), slack 1e-4 instead of 1e-6:
 * still only ever keeps more tokens than the exact bound needs. */
FAST_FN static int64_t gumbel_filter_avx2(const double *dt, const uint32_t *words, int64_t m, double bm, double thr,
                                          double *keep) {
    const __m256d vbm = _mm256_set1_pd(bm), vthr = _mm256_set1_pd(thr), zero = _mm256_setzero_pd(),
                  half = _mm256_set1_pd(2147483647.5), scale = _mm256_set1_pd(1.0 / 4294967296.0),
                  slack = _mm256_set1_pd(1.0 + 1e-4), one = _mm256_set1_pd(1.0);
    const __m128i flip = _mm_set1_epi32((int)0x80000000u);
    int64_t c = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256d d0 = _mm256_loadu_pd(dt + i), d1 = _mm256_loadu_pd(dt + i + 4);
        /* min(d - bm, 0): NaN -> 0 (max/min return the second operand on NaN), failed by thr */
        __m256d t0 = _mm256_min_pd(_mm256_sub_pd(d0, vbm), zero), t1 = _mm256_min_pd(_mm256_sub_pd(d1, vbm), zero);
        __m256 q = exp8f_avx2(_mm256_set_m128(_mm256_cvtpd_ps(t1), _mm256_cvtpd_ps(t0)));
        __m256d q0 = _mm256_cvtps_pd(_mm256_castps256_ps128(q)), q1 = _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1));
        __m128i w0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(words + i)), flip);
        __m128i w1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(words + i + 4)), flip);
        __m256d v0 = _mm256_mul_pd(_mm256_sub_pd(half, _mm256_cvtepi32_pd(w0)), scale);
        __m256d v1 = _mm256_mul_pd(_mm256_sub_pd(half, _mm256_cvtepi32_pd(w1)), scale);
        __m256d k0 = _mm256_and_pd(_mm256_cmp_pd(d0, vthr, _CMP_GE_OQ),
                                   _mm256_cmp_pd(v0, _mm256_mul_pd(q0, slack), _CMP_LE_OQ));
        __m256d k1 = _mm256_and_pd(_mm256_cmp_pd(d1, vthr, _CMP_GE_OQ),
                                   _mm256_cmp_pd(v1, _mm256_mul_pd(q1, slack), _CMP_LE_OQ));
        _mm256_storeu_pd(keep + i, _mm256_and_pd(k0, one));
        _mm256_storeu_pd(keep + i + 4, _mm256_and_pd(k1, one));
        c += __builtin_popcount((unsigned)_mm256_movemask_pd(k0)) + __builtin_popcount((unsigned)_mm256_movemask_pd(k1));
    }
    if (i < m) c += gumbel_filter_generic(dt + i, words + i, m - i, bm, thr, keep + i); /* the double bound */
    return c;
}
/* AVX2: the round keys once per tile; products' high halves left unmasked where only their low 32 bits are read
 * again (vpmuludq reads the low half; the outputs are packed from the low halves) */
FAST_FN static void philox_tile_avx2(uint64_t s0, uint64_t s1, uint64_t blk, int64_t n4, uint32_t *out) {
    __m256i k0[10], k1[10];
    uint32_t a = (uint32_t)s0, c = (uint32_t)(s0 >> 32);
    for (int q = 0; q < 10; q++, a += 0x9E3779B9U, c += 0xBB67AE85U) {
        k0[q] = _mm256_set1_epi64x(a);
        k1[q] = _mm256_set1_epi64x(c);
    }
    const __m256i m32 = _mm256_set1_epi64x(0xFFFFFFFFLL), M0 = _mm256_set1_epi64x(0xD2511F53LL),
                  M1 = _mm256_set1_epi64x(0xCD9E8D57LL), c2i = _mm256_set1_epi64x((uint32_t)s1),
                  c3i = _mm256_set1_epi64x((uint32_t)(s1 >> 32));
    for (int64_t g = 0; g < n4; g++, blk += 4, out += 16) {
        __m256i b4 = _mm256_setr_epi64x((long long)blk, (long long)(blk + 1), (long long)(blk + 2), (long long)(blk + 3));
        __m256i cc0 = b4, cc1 = _mm256_srli_epi64(b4, 32), cc2 = c2i, cc3 = c3i;
        for (int q = 0; q < 10; q++) {
            __m256i p0 = _mm256_mul_epu32(cc0, M0), p1 = _mm256_mul_epu32(cc2, M1);
            cc0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), cc1), k0[q]);
            cc2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), cc3), k1[q]);
            cc1 = p1;
            cc3 = p0;
        }
        /* lanes l: A = (w0, w1), B = (w2, w3) of block l; memory order A0 B0 A1 B1 A2 B2 A3 B3 */
        __m256i A = _mm256_or_si256(_mm256_and_si256(cc0, m32), _mm256_slli_epi64(cc1, 32));
        __m256i B = _mm256_or_si256(_mm256_and_si256(cc2, m32), _mm256_slli_epi64(cc3, 32));
        __m256i lo = _mm256_unpacklo_epi64(A, B), hi = _mm256_unpackhi_epi64(A, B); /* A0 B0 A2 B2, A1 B1 A3 B3 */
        _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}
#endif

/* The fast Gumbel-max over routing positions [offset, offset + size) of row b under seed (s0, s1) (word j for
 * position offset + j): 1 with the token in *tok, or 0 when too close to call (the exact loop decides). */
static int gumbel_max_fast(const Step *s, int64_t b, double mx, uint64_t s0, uint64_t s1, int64_t offset,
                           int64_t size, int64_t *tok) {
    const double gmax = gumbel_of(0xFFFFFFFFu) + 1e-6, margin = fast_margin;
    double best = -INFINITY, second = -INFINITY, dt[GUMBEL_TILE], q[GUMBEL_TILE], d[GUMBEL_TILE], g[GUMBEL_TILE];
    uint32_t words[GUMBEL_TILE], u[GUMBEL_TILE];
    int32_t idx[GUMBEL_TILE];
    int64_t best_j = -1;
    for (int64_t j0 = 0; j0 < size; j0 += GUMBEL_TILE) {
        const int64_t m = size - j0 < GUMBEL_TILE ? size - j0 : GUMBEL_TILE;
        /* live tokens: finite, within 1000 of the max, and able to reach best - margin (NaN and -inf fail) */
        const double thr = best - margin - gmax > -1000.0 ? best - margin - gmax : -1000.0;
        if (s->stride <= 0)
            s->dbl ? FAST_CALL(shift_d, dt, (const double *)s->logits + b * s->V + offset + j0, m, 1, mx)
                   : FAST_CALL(shift_f, dt, (const float *)s->logits + b * s->V + offset + j0, m, 1, mx);
        else
            for (int64_t i = 0; i < m; i++) dt[i] = logit_at(s, b, deinterleave(offset + j0 + i, s->V, s->stride)) - mx;
        int64_t n = 0, live = FAST_CALL(live_count, dt, m, thr);
        if (live == 0) continue;
        if (4 * live >= m) {
            /* mostly live (a dense row): the tile's Philox words four blocks at a time, then the filter with no log:
             * a token reaches best - margin only if E = -log U <= exp(-(best - margin - d)), so only if 1 - U <= E <=
             * that (slack 1e-6 for fast_exp's 1e-14 and the roundings of d - best); once a good best is known most
             * tokens fail. An argument >= 0 (every token while best = -inf) passes every token (1 - U < 1). */
#if HERO_X86
            if (isa->needs >= 2)
                philox_tile_avx512(s0, s1, (uint64_t)j0 >> 2, (m + 31) >> 5, words);
            else
#endif
                FAST_CALL(philox_tile, s0, s1, (uint64_t)j0 >> 2, (m + 15) >> 4, words);
            if (FAST_CALL(gumbel_filter, dt, words, m, best - margin, thr, q) == 0) continue;
            for (int64_t i = 0; i < m; i++) {
                if (q[i] != 0.0) {
                    d[n] = dt[i];
                    idx[n] = (int32_t)i;
                    u[n++] = words[i];
                }
            }
        } else {
            /* few live tokens (top-k / top-p rows): each live token's block once */
            int64_t block = -1;
            uint32_t w[4];
            for (int64_t i = 0; i < m; i++) {
                if (!(dt[i] >= thr)) continue;
                const int64_t j = j0 + i;
                if (j >> 2 != block) {
                    block = j >> 2;
                    philox_block(s0, s1, (uint64_t)block, w);
                }
                d[n] = dt[i];
                idx[n] = (int32_t)i;
                u[n++] = w[j & 3];
            }
        }
        if (n == 0) continue;
        FAST_CALL(fast_gumbel, u, g, n);
        for (int64_t k = 0; k < n; k++) {
            double sc = d[k] + g[k];
            if (sc > best) {
                second = best;
                best = sc;
                best_j = j0 + idx[k];
            } else if (sc > second) {
                second = sc;
            }
        }
    }
    if (best_j < 0 || !(best > -900.0) || !(best - second > margin)) return 0;
    *tok = deinterleave(offset + best_j, s->V, s->stride);
    return 1;
}

static void step_row(Step *s, int64_t b, double *p) {
    const int64_t V = s->V, *c = s->ctx + b * s->h;
    uint64_t msg[10];
    for (int64_t i = 0; i < s->h / 2; i++)
        msg[i] = ((uint64_t)c[2 * i] & 0xFFFFFFFFULL) | ((uint64_t)c[2 * i + 1] << 32);
    uint64_t last = (uint64_t)((4 * s->h) & 0xFF) << 56;
    if (s->h & 1) last |= (uint64_t)c[s->h - 1] & 0xFFFFFFFFULL;
    msg[s->h / 2] = last;
    int64_t slot = s->slots[b];
    if (slot < 0 || slot >= s->nslots) {
        s->err = 3;
        return;
    }
    int mark = step_mark(s, slot, msg);
    const int64_t gen = s->generated[slot]; /* spec v5's generator index: the count before this step */
    s->marks[b] = mark;
    s->generated[slot] += 1;
    double mx = row_max(s, b), total = 0.0;
    uint64_t lo[64], hi[64];
    if (mark) {
        uint64_t s0, s1;
        siphash128(s->pk0, s->pk1, msg, (int)s->nw, &s0, &s1);
        if (s->spec == 5) {
            /* one level per position, from its lane and the public share at this generator index (reference
             * `v5_level`, 0-based here); segment 0's entry holds the whole values (every segment holds the same);
             * only that level's seed, into lo[0]: the Gumbel-max below reads lo[nsched] = lo[0] */
            const int64_t q = (int64_t)(((uint64_t)philox_word(s0, s1, 0) * 100u) >> 32);
            const int64_t pct = gen < s->front ? s->front_public : s->public_;
            const int64_t l = q < pct ? 0 : 1 + (q - pct) * (s->L - 1) / (100 - pct); /* q >= pct: pct <= 99 */
            const int64_t *val = s->payload + slot * s->K * s->L;
            int ok = l < s->L;
            for (int64_t i = 0; i < s->L; i++) ok = ok && val[i] >= 0 && val[i] < s->C; /* as the torch step */
            if (!ok || !level_seed(s, l, s->k0[l * s->C + val[l]], s->k1[l * s->C + val[l]], msg, &lo[0], &hi[0])) {
                s->err = 1;
                s->out[b] = 0;
                return;
            }
        } else {
            int64_t seg = (int64_t)(((uint64_t)philox_word(s0, s1, 0) * (uint64_t)s->segments) >> 32);
            const int64_t *val = s->payload + (slot * s->K + seg) * s->L;
            for (int64_t l = 0; l < s->L; l++) {
                if (val[l] < 0 || val[l] >= s->C ||
                    !level_seed(s, l, s->k0[l * s->C + val[l]], s->k1[l * s->C + val[l]], msg, &lo[l], &hi[l])) {
                    s->err = 1;
                    s->out[b] = 0;
                    return;
                }
            }
        }
    }
    int64_t offset = 0, size = V;
    int routed = 0, fast = isfinite(mx) && step_fast_enabled;
    if (fast && !mark) {
        s->out[b] = draw_fast(s, b, mx, p);
        return;
    }
    if (fast && f32_tier(s)) routed = route_levels(s, b, NULL, mx, 0.0, lo, hi, TIER_F32, &offset, &size);
    if (fast && !routed) routed = route_levels(s, b, NULL, mx, 0.0, lo, hi, TIER_F64, &offset, &size);
    if (!fast || !routed) {
        if (!isfinite(mx)) mx = 0.0;
        /* p[y] = exp(x - max) in routing order; -inf (warped away) stays 0 */
        total = 0.0;
        gather_routed(s, b, mx, p); /* x - mx: finite exactly where x is (mx is finite here) */
        for (int64_t y = 0; y < V; y++) {
            p[y] = isfinite(p[y]) ? exp(p[y]) : 0.0;
            total += p[y];
        }
        if (mark) route_levels(s, b, p, mx, total, lo, hi, TIER_EXACT, &offset, &size);
    }
    if (!mark) {
        double target = s->rand[b] * total, acc = 0.0;
        int64_t y = 0, lastpos = 0;
        for (; y < V; y++) {
            if (p[y] > 0.0) {
                lastpos = y;
                acc += p[y];
                if (acc > target) break;
            }
        }
        s->out[b] = deinterleave(y < V ? y : lastpos, V, s->stride);
        return;
    }
    if (fast && gumbel_max_fast(s, b, mx, lo[s->nsched], hi[s->nsched], offset, size, &s->out[b])) return;
    /* Gumbel-max inside the chunk (the exact path). A token whose logit is so low that even the largest Gumbel term (u = 2^32 - 1)
     * leaves it below the best score so far cannot win (rounding is monotone): skipped before its two logs. */
    int64_t best_j = 0, ll = s->nsched, block = -1;
    const double gmax = gumbel_of(0xFFFFFFFFu) + 1e-6; /* slack: libm log need not be monotone to the last bit */
    double best = -INFINITY;
    uint32_t w[4];
    for (int64_t j = 0; j < size; j++) {
        double x = logit_at(s, b, deinterleave(offset + j, V, s->stride));
        if (!isfinite(x) || (x - mx) + gmax < best) continue;
        if (j >> 2 != block) {
            block = j >> 2;
            philox_block(lo[ll], hi[ll], (uint64_t)block, w);
        }
        double sc = (x - mx) + gumbel_of(w[j & 3]);
        if (sc > best) {
            best = sc;
            best_j = j;
        }
    }
    s->out[b] = deinterleave(offset + best_j, V, s->stride);
}

PyDoc_STRVAR(sample_step_doc,
             "sample_step(logits, dbl, B, V, ctx, h, payload, K, L, k0, k1, C, pk0, pk1, schedule, segments, stride,\n"
             " spec, slots, S, generated, seen, counts, cap, rand, out, marks[, nthreads, sk0, sk1, front_tokens,\n"
             " front_public, public]): one fused generation step (gpu/step.py).\n"
             "logits float32/float64[B*V], ctx int64[B*h], k0/k1 int64[L*C], schedule int64[L-1]; row b's state is\n"
             "slot slots[b] < S: payload int64[S*K*L], generated int64[S] (+1), seen int64[S*cap*nw] and counts\n"
             "int64[S] (appended); rand float64[B] (unmarked rows), out int64[B], marks int64[B] (1 = watermarked);\n"
             "nthreads: rows split over that many threads (each row's work and result are the same either way);\n"
             "sk0/sk1 int64[L]: spec v3-v5's level keys (required when spec >= 3);\n"
             "front_tokens, front_public, public: spec v5's multiplex (required there, ignored otherwise): a marked\n"
             "row's level is 0 when its lane q = (position word 0 * 100) >> 32 is below the public percent\n"
             "(front_public while generated[slot] < front_tokens, else public), else 1 + (q - pct) (L - 1) / (100 - pct);\n"
             "spec v5 routes nothing (empty schedule, stride 0) and draws from segment 0's values.");

/* Rows [lo, hi) of a step on one thread, with its own copy of the shared state (its own error flag) and its
 * own V-sized buffer. Rows touch disjoint slots (the caller's contract), so threads never share a write. */
typedef struct {
    Step s;
    int64_t lo, hi;
    double *p;
} StepSlice;

static void *step_slice_main(void *arg) {
    StepSlice *t = (StepSlice *)arg;
    for (int64_t b = t->lo; b < t->hi && !t->s.err; b++) step_row(&t->s, b, t->p);
    return NULL;
}

#define STEP_THREADS_MAX 64
#define STEP_THREADS_MIN_WORK 65536 /* B * V below this: one thread (a thread costs ~20-50 us to start) */

static void step_rows(Step *s, double *p, int nt) {
    StepSlice sl[STEP_THREADS_MAX];
    for (int i = 0; i < nt; i++) {
        sl[i].s = *s;
        sl[i].lo = s->B * i / nt;
        sl[i].hi = s->B * (i + 1) / nt;
        sl[i].p = p + (size_t)i * (size_t)s->V;
    }
#if HERO_THREADS
    pthread_t th[STEP_THREADS_MAX];
    int started[STEP_THREADS_MAX] = {0};
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, step_slice_main, &sl[i]) == 0;
    step_slice_main(&sl[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            step_slice_main(&sl[i]); /* could not start a thread: do its share here */
    }
#else
    for (int i = 0; i < nt; i++) step_slice_main(&sl[i]);
#endif
    for (int i = 0; i < nt; i++)
        if (sl[i].s.err && !s->err) s->err = sl[i].s.err;
}

static PyObject *py_sample_step(PyObject *self, PyObject *args) {
    Py_buffer lg, ctx, pay, k0, k1, sched, slots, gen, seen, counts, rnd, out, mk;
    Py_buffer sk0 = {0}, sk1 = {0};
    int dbl;
    Py_ssize_t B, V, h, K, L, C, segments, stride, spec, S, cap;
    unsigned long long pk0, pk1;
    int nthreads = 1;
    Py_ssize_t front = -1, front_public = -1, public_ = -1; /* spec v5 only: -1 = not given */
    if (!PyArg_ParseTuple(args, "y*pnny*ny*nny*y*nKKy*nnny*nw*w*w*ny*w*w*|iy*y*nnn", &lg, &dbl, &B, &V, &ctx, &h, &pay,
                          &K, &L, &k0, &k1, &C, &pk0, &pk1, &sched, &segments, &stride, &spec, &slots, &S, &gen,
                          &seen, &counts, &cap, &rnd, &out, &mk, &nthreads, &sk0, &sk1, &front, &front_public,
                          &public_))
        return NULL;
    PyObject *result = NULL;
    double *p = NULL;
    int64_t nsched = sched.len / 8, nw = h / 2 + 1;
    if (B < 0 || V < 1 || h < 1 || h > 16 || K < 1 || L < 1 || L > 64 || C < 1 ||
        nsched != (spec == 5 ? 0 : L - 1) || segments < 1 || segments > K || cap < 0 || S < 0) {
        PyErr_SetString(PyExc_ValueError, "sample_step: bad shapes");
        goto done;
    }
    /* spec v5: its multiplex given, percents in 0..100, and a deeper level for every non-public lane */
    if (spec == 5 && (stride != 0 || front < 0 || front_public < 0 || front_public > 100 || public_ < 0 ||
                      public_ > 100 || (L == 1 && (front_public < 100 || public_ < 100)))) {
        PyErr_SetString(PyExc_ValueError, "sample_step: spec 5 needs front_tokens >= 0, front_public and public in "
                                          "0..100 (100 with one level) and stride 0");
        goto done;
    }
    for (int64_t l = 0; l < nsched; l++)
        if (((const int64_t *)sched.buf)[l] < 1) {
            PyErr_SetString(PyExc_ValueError, "sample_step: bad schedule");
            goto done;
        }
    if (!check_len(&lg, B * V * (dbl ? 8 : 4), "logits") || !check_len(&ctx, B * h * 8, "ctx") ||
        !check_len(&pay, S * K * L * 8, "payload") || !check_len(&k0, L * C * 8, "k0") ||
        !check_len(&k1, L * C * 8, "k1") || !check_len(&slots, B * 8, "slots") || !check_len(&gen, S * 8, "generated") ||
        !check_len(&seen, S * cap * nw * 8, "seen") || !check_len(&counts, S * 8, "counts") ||
        !check_len(&rnd, B * 8, "rand") || !check_len(&out, B * 8, "out") || !check_len(&mk, B * 8, "marks"))
        goto done;
    if (spec >= 3 && (!sk0.buf || !sk1.buf || !check_len(&sk0, L * 8, "sk0") || !check_len(&sk1, L * 8, "sk1"))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sample_step: spec 3 to 5 need the level keys sk0/sk1");
        goto done;
    }
    /* rows over threads only where a row's two passes over V outweigh starting a thread */
    int nt = nthreads < 1 ? 1 : (nthreads > STEP_THREADS_MAX ? STEP_THREADS_MAX : nthreads);
    if (nt > B) nt = (int)(B < 1 ? 1 : B);
    if ((int64_t)B * V < STEP_THREADS_MIN_WORK) nt = 1;
    p = malloc((size_t)V * sizeof(double) * (size_t)nt);
    if (!p) {
        PyErr_NoMemory();
        goto done;
    }
    {
        Step s = {lg.buf, dbl, B, V, h, K, L, C, nsched, segments, stride, spec, cap, nw, ctx.buf, pay.buf,
                  sched.buf, slots.buf, S, k0.buf, k1.buf, pk0, pk1, gen.buf, counts.buf, out.buf, mk.buf, seen.buf,
                  rnd.buf, 0, spec >= 3 ? sk0.buf : NULL, spec >= 3 ? sk1.buf : NULL, front, front_public, public_};
        Py_BEGIN_ALLOW_THREADS
        step_rows(&s, p, nt);
        Py_END_ALLOW_THREADS
        if (s.err == 1)
            PyErr_SetString(PyExc_ValueError, "sample_step: payload value outside the key table or unknown spec");
        else if (s.err == 2)
            PyErr_SetString(PyExc_ValueError, "sample_step: context log full (grow it before the step)");
        else if (s.err == 3)
            PyErr_SetString(PyExc_ValueError, "sample_step: slot index out of range");
        else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
done:
    free(p);
    PyBuffer_Release(&lg);
    PyBuffer_Release(&ctx);
    PyBuffer_Release(&pay);
    PyBuffer_Release(&k0);
    PyBuffer_Release(&k1);
    PyBuffer_Release(&sched);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&gen);
    PyBuffer_Release(&seen);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&rnd);
    PyBuffer_Release(&out);
    PyBuffer_Release(&mk);
    if (sk0.buf) PyBuffer_Release(&sk0);
    if (sk1.buf) PyBuffer_Release(&sk1);
    return result;
}

PyDoc_STRVAR(isa_doc,
             "isa([name]) -> str: the kernel path in use ('avx512', 'avx2' or 'generic'); with a name, switch to\n"
             "that path (ValueError if unknown or not supported by this CPU) and return the previous one.\n"
             "All paths give identical results; this exists for tests and benchmarks.");

static PyObject *py_isa(PyObject *self, PyObject *args) {
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|s", &name)) return NULL;
    const Isa *prev = isa;
    if (name) {
        int i = 0;
        while (i < NISAS && strcmp(isas[i].name, name) != 0) i++;
        if (i == NISAS || !isa_supported(&isas[i])) {
            PyErr_Format(PyExc_ValueError, "kernel path %s is unknown or not supported by this CPU", name);
            return NULL;
        }
        isa = &isas[i];
    }
    return PyUnicode_FromString(prev->name);
}

PyDoc_STRVAR(fast_step_doc,
             "fast_step([on[, margin]]) -> bool: whether sample_step routes marked rows on the fast path (vectorised\n"
             "exp, each decision taken only when it leads by more than margin, default 1e-7, and by max(margin, 1e-4)\n"
             "on the float32 tier; the same tokens as the exact path); with arguments, set them and return the\n"
             "previous switch.");

static PyObject *py_fast_step(PyObject *self, PyObject *args) {
    int on = -1;
    double margin = -1.0;
    if (!PyArg_ParseTuple(args, "|pd", &on, &margin)) return NULL;
    int prev = step_fast_enabled;
    if (on >= 0) step_fast_enabled = on;
    if (margin >= 0.0) fast_margin = margin > 1e-7 ? margin : 1e-7; /* never below the proven-safe margin */
    return PyBool_FromLong(prev);
}

PyDoc_STRVAR(fast_exp_doc,
             "fast_exp(buf): the fast path's exp, in place over a float64 buffer (the tests check the error bound\n"
             "its margin rests on: relative error < 1e-14 on [-708, 0], 0 below -708 and for -inf and NaN).");

static PyObject *py_fast_exp(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "w*", &buf)) return NULL;
    if (buf.len % 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "fast_exp: a float64 buffer");
        return NULL;
    }
    FAST_CALL(fast_exp, (double *)buf.buf, buf.len / 8);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(fast_gumbel_doc,
             "fast_gumbel(words, out): the fast Gumbel-max's G(u) = -log(-log((u + 0.5) 2^-32)) of uint32 words into a\n"
             "float64 buffer (the tests check the error bound its margin rests on: within 1e-12 of libm's).");

static PyObject *py_fast_gumbel(PyObject *self, PyObject *args) {
    Py_buffer wb, ob;
    if (!PyArg_ParseTuple(args, "y*w*", &wb, &ob)) return NULL;
    PyObject *res = NULL;
    if (wb.len % 4 || ob.len != 2 * wb.len) {
        PyErr_SetString(PyExc_ValueError, "fast_gumbel: uint32 words and a float64 buffer of the same length");
    } else {
        FAST_CALL(fast_gumbel, (const uint32_t *)wb.buf, (double *)ob.buf, wb.len / 4);
        Py_INCREF(Py_None);
        res = Py_None;
    }
    PyBuffer_Release(&wb);
    PyBuffer_Release(&ob);
    return res;
}

PyDoc_STRVAR(fast_mass_doc,
             "fast_mass(buf, mx, tier) -> float: a routing tier's mass of a contiguous float32 run, the sum of\n"
             "exp(x - mx) ('f32': the float32 pass, None where this CPU or build has no such tier; 'f64': the double\n"
             "pass), for the tests of the error bounds the tiers' margins rest on. mx must be the run's max or above.");

static PyObject *py_fast_mass(PyObject *self, PyObject *args) {
    Py_buffer buf;
    double mx;
    const char *tier;
    if (!PyArg_ParseTuple(args, "y*ds", &buf, &mx, &tier)) return NULL;
    PyObject *res = NULL;
    const float *x = (const float *)buf.buf;
    int64_t n = buf.len / 4;
    if (buf.len % 4)
        PyErr_SetString(PyExc_ValueError, "fast_mass: a float32 buffer");
    else if (strcmp(tier, "f64") == 0)
        res = PyFloat_FromDouble(FAST_CALL(exp_sum_f, x, n, 1, mx));
    else if (strcmp(tier, "f32") != 0)
        PyErr_SetString(PyExc_ValueError, "fast_mass: tier is 'f32' or 'f64'");
    else {
#if HERO_X86
        if (isa->needs >= 1 && fast_fma) res = PyFloat_FromDouble(exp_sum_f32_avx2(x, n, mx));
#endif
        if (!res) {
            Py_INCREF(Py_None);
            res = Py_None;
        }
    }
    PyBuffer_Release(&buf);
    return res;
}

PyDoc_STRVAR(isas_doc, "isas() -> tuple of the kernel paths this CPU supports, best first.");

static PyObject *py_isas(PyObject *self, PyObject *args) {
    PyObject *res = PyTuple_New(0);
    for (int i = 0; res && i < NISAS; i++)
        if (isa_supported(&isas[i])) {
            PyObject *name = PyUnicode_FromString(isas[i].name);
            if (!name || _PyTuple_Resize(&res, PyTuple_GET_SIZE(res) + 1) < 0) {
                Py_XDECREF(name);
                Py_XDECREF(res);
                return NULL;
            }
            PyTuple_SET_ITEM(res, PyTuple_GET_SIZE(res) - 1, name);
        }
    return res;
}

static PyMethodDef methods[] = {
    {"isa", py_isa, METH_VARARGS, isa_doc},
    {"isas", py_isas, METH_NOARGS, isas_doc},
    {"segment_scores", py_segment_scores, METH_VARARGS, segment_scores_doc},
    {"prf_seeds", py_prf_seeds, METH_VARARGS, prf_seeds_doc},
    {"scored_positions", py_scored_positions, METH_VARARGS, scored_positions_doc},
    {"philox_stream", py_philox_stream, METH_VARARGS, philox_stream_doc},
    {"sample_step", py_sample_step, METH_VARARGS, sample_step_doc},
    {"fast_step", py_fast_step, METH_VARARGS, fast_step_doc},
    {"fast_exp", py_fast_exp, METH_VARARGS, fast_exp_doc},
    {"fast_mass", py_fast_mass, METH_VARARGS, fast_mass_doc},
    {"fast_gumbel", py_fast_gumbel, METH_VARARGS, fast_gumbel_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hero_kernels",
                                    "HeRo v1 CPU evidence kernel (see gpu/cpu_kernel.py).", -1, methods};

PyMODINIT_FUNC PyInit__hero_kernels(void) {
    isa = &isas[0];
    while (!isa_supported(isa)) isa++; /* the last path, generic, is always supported */
#if HERO_X86
    fast_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m) PyModule_AddIntConstant(m, "ABI", 10); /* 10: spec v5 read filter, scored_positions */
#ifdef HERO_SOURCE_SHA
    /* the SHA-256 of this file at build time (setup.py, gpu/cpu_kernel.py): a build older than the source is stale */
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA", HERO_SOURCE_SHA) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
