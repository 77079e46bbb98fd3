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
 * Work split: (1) context masking (dedup) per row, sequential; (2) per scored token (threads over
 * tokens): message words, segment, window, routing path; (3) work items (row, table, slice of 256
 * candidates) from a shared counter: each item owns its cells and walks the row's tokens in order,
 * so no cell is written by two threads and no [tokens x candidates] buffer is needed (a v2 private
 * level has 4096 candidates).
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

/* Chunk index of relative item x in a range of `size` items split into k chunks (sizes differ <= 1). */
static inline int64_t chunk_of(int64_t size, int64_t k, int64_t x) {
    int64_t a = size / k, small = k - size % k;
    if (a > 0 && x < small * a) return x / a;
    return small + (x - small * a) / (a + 1);
}

static inline int64_t chunk_start(int64_t size, int64_t k, int64_t i) {
    int64_t a = size / k, small = k - size % k;
    return i <= small ? i * a : small * a + (i - small) * (a + 1);
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
} Work;

typedef struct {
    Work *w;
    int64_t lo, hi; /* token range (phase 2) */
    int phase;
} Slice;

/* Four candidates at a time: SipHash and Philox in 4-lane vectors (GCC/Clang vector extensions; on
 * x86-64 Linux an AVX2 clone is chosen at load time), log() per lane from libm. */
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
#if defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
#define HERO_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HERO_CLONES
#endif
#else
#define HERO_VEC 0
#define HERO_CLONES
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
    int64_t a = vocab / stride, r = vocab % stride, c = x % stride, q = x / stride;
    return c * a + (c < r ? c : r) + q;
}

static void routing_path(const Work *w, int64_t token, int64_t *path) {
    int64_t offset = 0, size = w->vocab;
    token = interleave(token, w->vocab, w->stride);
    for (int64_t l = 0; l < w->nsched; l++) {
        int64_t k = w->schedule[l];
        int64_t i = chunk_of(size, k, token - offset);
        int64_t st = chunk_start(size, k, i), en = chunk_start(size, k, i + 1);
        path[l] = i;
        offset += st;
        size = en - st;
    }
    path[w->nsched] = token - offset;
}

/* Phase 2, per scored token: packed message, position segment, window and routing path. */
static void prepare_tokens(Work *w, int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; n++) {
        int64_t token, r = w->tok_row[n];
        uint64_t s0, s1, *msg = w->msg + n * w->nwords;
        prepare_message(w, n, msg, &token);
        siphash128(w->pk0, w->pk1, msg, w->nwords, &s0, &s1);
        w->seg[n] = (int64_t)(((uint64_t)philox_word(s0, s1, 0) * (uint64_t)w->segments) >> 32);
        int64_t rank = n - w->row_start[r], cnt = w->row_start[r + 1] - w->row_start[r];
        w->win[n] = rank * w->windows / cnt;
        routing_path(w, token, w->path + n * (w->nsched + 1));
    }
}

/* Phase 3, one work item: candidates [c0, c1) of table t for every scored token of row r, added to
 * their cells in text order (each cell belongs to exactly one item: deterministic sums). */
HERO_CLONES
static void score_item(const Work *w, int64_t r, int64_t t, int64_t c0, int64_t c1) {
    const int64_t C = w->sizes[t], lvl = w->levels[t] - 1, L1 = w->nsched + 1;
    const int64_t cells = w->per_value[t] ? 1 : w->segments;
    const uint64_t *K0 = w->k0 + w->koff[t], *K1 = w->k1 + w->koff[t];
    double *base = w->out + w->ooff[t] + r * w->windows * cells * C;
    const int nwords = w->nwords;
    for (int64_t n = w->row_start[r]; n < w->row_start[r + 1]; n++) {
        const uint64_t *msg = w->msg + n * nwords;
        const uint64_t j = (uint64_t)w->path[n * L1 + lvl];
        double *dst = base + (w->win[n] * cells + (cells == 1 ? 0 : w->seg[n])) * C;
        int64_t c = c0;
#if HERO_VEC
        for (; c + 4 <= c1; c += 4) {
            v4u k0, k1;
            memcpy(&k0, K0 + c, sizeof k0);
            memcpy(&k1, K1 + c, sizeof k1);
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
            /* Philox4x32-10, 32-bit words held in 64-bit lanes; one block index for all lanes */
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
            for (int l = 0; l < 4; l++) dst[c + l] += -log((4294967295.5 - (double)u[l]) / 4294967296.0);
        }
#endif
        for (; c < c1; c++) {
            uint64_t s0, s1;
            siphash128(K0[c], K1[c], msg, nwords, &s0, &s1);
            uint32_t u = philox_word(s0, s1, j);
            dst[c] += -log((4294967295.5 - (double)u) / 4294967296.0);
        }
    }
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
        if (w->row_start[r + 1] > w->row_start[r]) score_item(w, r, t, c0, c1);
    }
}

#if HERO_THREADS
static void *slice_main(void *arg) {
    Slice *s = (Slice *)arg;
    if (s->phase == 2)
        prepare_tokens(s->w, s->lo, s->hi);
    else
        run_items(s->w);
    return NULL;
}
#endif

/* Runs phase 2 (token slices) or phase 3 (shared item queue) on nt threads, the caller included. */
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
    if (phase == 2)
        prepare_tokens(w, 0, w->n);
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
            uint64_t hv = 0x9E3779B97F4A7C15ULL;
            for (int64_t i = 0; i < h; i++) hv = mix64(hv ^ (uint64_t)ctx[i]) + (uint64_t)i;
            int64_t slot = (int64_t)(hv & (uint64_t)(cap - 1));
            int dup = 0;
            while (table[slot]) {
                const int64_t *other = row + table[slot] - h;
                if (memcmp(other, ctx, (size_t)h * sizeof(int64_t)) == 0) {
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

static int check_len(Py_buffer *b, Py_ssize_t nbytes, const char *name) {
    if (b->len != nbytes) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, nbytes, b->len);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(segment_scores_doc,
             "segment_scores(ids, lengths, B, T, h, vocab, schedule, segments, windows, pk0, pk1, levels, sizes,"
             " per_value, k0, k1, out, counts, nthreads, stride) -> scored token count\n\n"
             "ids int64[B*T], lengths int64[B], schedule int64[L-1], levels/sizes/per_value int64[ntables],\n"
             "k0/k1 int64[sum sizes] (key words), out float64 (zeroed): table t as [B, W, cells_t, C_t] one after\n"
             "the other (cells_t = 1 if per_value[t] else segments), counts int64[B*W*segments] (zeroed).");

static PyObject *py_segment_scores(PyObject *self, PyObject *args) {
    Py_buffer ids, lengths, schedule, levels, sizes, per_value, k0, k1, out, counts;
    Py_ssize_t B, T, h, vocab, segments, windows, stride;
    unsigned long long pk0, pk1;
    int nthreads;
    if (!PyArg_ParseTuple(args, "y*y*nnnny*nnKKy*y*y*y*y*w*w*in", &ids, &lengths, &B, &T, &h, &vocab, &schedule,
                          &segments, &windows, &pk0, &pk1, &levels, &sizes, &per_value, &k0, &k1, &out, &counts,
                          &nthreads, &stride))
        return NULL;
    PyObject *result = NULL;
    int64_t *tok_row = NULL, *tok_pos = NULL, *seg = NULL, *win = NULL, *path = NULL, *table = NULL;
    int64_t *row_start = NULL, *koff = NULL, *ooff = NULL, *first = NULL;
    uint64_t *msg = NULL;
    int64_t nsched = schedule.len / 8, ntables = levels.len / 8, ctot = 0, ocells = 0;
    if (B < 0 || T < 0 || h < 1 || h > 16 || vocab < 1 || segments < 1 || windows < 1 || nsched > 62 ||
        stride < 0) {
        PyErr_SetString(PyExc_ValueError, "bad shape or parameter");
        goto done;
    }
    if (!check_len(&ids, B * T * 8, "ids") || !check_len(&lengths, B * 8, "lengths") ||
        !check_len(&sizes, ntables * 8, "sizes") || !check_len(&per_value, ntables * 8, "per_value"))
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
        tok_row = malloc((size_t)(maxn + 1) * sizeof(int64_t));
        tok_pos = malloc((size_t)(maxn + 1) * sizeof(int64_t));
        seg = malloc((size_t)(maxn + 1) * sizeof(int64_t));
        win = malloc((size_t)(maxn + 1) * sizeof(int64_t));
        path = malloc((size_t)(maxn * (nsched + 1) + 1) * sizeof(int64_t));
        msg = malloc((size_t)(maxn * nwords + 1) * sizeof(uint64_t));
        row_start = malloc((size_t)(B + 1) * sizeof(int64_t));
        table = malloc((size_t)cap * sizeof(int64_t));
        if (!tok_row || !tok_pos || !seg || !win || !path || !msg || !row_start || !table) {
            PyErr_NoMemory();
            goto done;
        }
        Work w = {pids, B, T, h, vocab, segments, windows, nsched, ntables, schedule.buf, levels.buf, sizes.buf,
                  per_value.buf, stride, k0.buf, k1.buf, koff, (uint64_t)pk0, (uint64_t)pk1, 0, tok_row, tok_pos,
                  row_start, seg, win, path, msg, nwords, out.buf, ooff, SLICE, 0, first, 0};
        int64_t n;
        Py_BEGIN_ALLOW_THREADS
        n = select_tokens(pids, plen, B, T, h, tok_row, tok_pos, table, cap);
        if (n < 0) goto unlock;
        w.n = n;
        for (int64_t r = 0, i = 0; r <= B; r++) {
            while (i < n && tok_row[i] < r) i++;
            row_start[r] = i;
        }
        int nt = nthreads < 1 ? 1 : (nthreads > 64 ? 64 : nthreads);
        /* Phase 2 starts a thread only for >= 1024 tokens of work: starting one costs ~100 us on a small VM,
           about 500 tokens' worth (a single ~220-token text was ~100 us slower with two threads than one). */
        int64_t per = n / 1024;
        int nt2 = per < nt ? (per > 0 ? (int)per : 1) : nt;
        parallel(&w, 2, nt2);
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
    free(tok_row);
    free(tok_pos);
    free(seg);
    free(win);
    free(path);
    free(msg);
    free(row_start);
    free(table);
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

static PyMethodDef methods[] = {
    {"segment_scores", py_segment_scores, METH_VARARGS, segment_scores_doc},
    {"prf_seeds", py_prf_seeds, METH_VARARGS, prf_seeds_doc},
    {"philox_stream", py_philox_stream, METH_VARARGS, philox_stream_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hero_kernels",
                                    "HeRo v1 CPU evidence kernel (see gpu/cpu_kernel.py).", -1, methods};

PyMODINIT_FUNC PyInit__hero_kernels(void) {
    PyObject *m = PyModule_Create(&module);
    if (m) PyModule_AddIntConstant(m, "ABI", 2);
    return m;
}
