"""The C step's fast Gumbel-max (gpu/_native/hero_kernels.c `gumbel_max_fast`: Philox four blocks at a time, a
log-free filter, a vectorised log, each draw taken only when it leads the runner-up by the margin) draws exactly
the exact path's tokens (libm logs, `fast_step(False)`): spec v5's whole-vocabulary draw on dense float32/float64
rows, top-k rows and constructed near-ties, V = 1,000 / 49,152 / 262,144, with the default margin, a wide one
(some draws go back) and an enormous one (every draw goes back); and its G is within the bound the margin rests on."""

from __future__ import annotations

import math
import random

import pytest
import torch

from gpu import cpu_kernel
from tests.helpers.keys import fixed_keyset
from verifier.engine import reference as R
from verifier.engine.fused import make_fused_sampler
from verifier.engine.payload import encode_payload
from verifier.engine.profile import resolve_profile

native_ok = cpu_kernel.available() and hasattr(cpu_kernel.load(), "fast_gumbel")
pytestmark = pytest.mark.skipif(not native_ok, reason="C kernel not built")

MODES = (("exact", False, 1e-7), ("fast", True, 1e-7), ("wide", True, 0.05), ("every-fallback", True, 1e9))


def _i64(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _setup(vocab: int, b: int, seed: int):
    profile = resolve_profile("v5")
    from dataclasses import replace

    profile = replace(profile, vocab_size=vocab)
    keyset = fixed_keyset(profile, seed)
    fs = make_fused_sampler(profile, keyset)
    rng = random.Random(seed)
    h = profile.context_width
    ctx = torch.tensor([[rng.randrange(vocab) for _ in range(h)] for _ in range(b)])
    vals = {f.name: rng.randrange(1 << f.bits) if lv.issued is None or i else rng.choice(lv.issued)
            for lv in profile.levels for i, f in enumerate(lv.fields)}
    pay = torch.tensor([encode_payload(profile, vals)] * b)
    gen = torch.full((b,), 60, dtype=torch.int64)  # past the opening and the front: every row marked
    return profile, keyset, fs, ctx, pay, gen


def _draws(fs, logits, ctx, pay, gen) -> dict[str, list[int]]:
    mod = cpu_kernel.load()
    got = {}
    try:
        for name, on, margin in MODES:
            mod.fast_step(on, margin)
            g = gen.clone()
            tokens, marks = fs.step(logits, ctx, pay, g, fs.new_log(g.shape[0]), torch.Generator().manual_seed(3),
                                    backend="native", with_marks=True)
            assert bool(marks.all())
            got[name] = tokens.tolist()
    finally:
        mod.fast_step(True, 1e-7)
    return got


def _check(fs, logits, ctx, pay, gen) -> list[int]:
    got = _draws(fs, logits, ctx, pay, gen)
    assert got["fast"] == got["exact"] == got["wide"] == got["every-fallback"]
    return got["exact"]


def _gumbels(profile, keyset, ctx_row: list[int], pay_row, vocab: int) -> list[float]:
    """G_j of a marked row (generated 60: public share `public`) for every token, the exact path's formula."""
    vals = pay_row[0].tolist()
    lv = R.v5_level(R.v5_lane(keyset.position, ctx_row), profile.multiplex.public_percent(60), profile.depth)
    t = keyset.tables[lv - 1]
    s0, s1 = R.v3_seed(R.prf_seed(t.level_key, ctx_row), t.entries[vals[lv - 1]])
    words = cpu_kernel.random_u32_stream(torch.tensor([_i64(s0)]), torch.tensor([_i64(s1)]), vocab)[0].tolist()
    return [-math.log(-math.log((w + 0.5) / 4294967296.0)) for w in words]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vocab,b", [(1000, 16), (49152, 16), (262144, 3)])
def test_dense_and_top_k_rows(vocab, b, dtype):
    _, _, fs, ctx, pay, gen = _setup(vocab, b, vocab % 97)
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(b, vocab, generator=g, dtype=torch.float64) * 2
    for r in range(1, b, 2):  # every other row top-k warped: k = 50, 1 or 5
        k = (50, 1, 5)[(r // 2) % 3]
        kth = logits[r].topk(k).values[-1]
        logits[r] = logits[r].masked_fill(logits[r] < kth, float("-inf"))
    if b > 4:
        logits[2] *= 10  # peaked
        logits[4] = logits[4] * 0.01  # flat: many close scores
    _check(fs, logits.to(dtype), ctx, pay, gen)


@pytest.mark.parametrize("vocab", [1000, 49152])
def test_near_ties(vocab):
    """Rows where the runner-up is moved to within 1e-12 .. 1e-6 of the winner's score (either side, and to an
    exact tie in float64): the fast path draws the exact path's token every time (sending the close ones back)."""
    b = 12
    profile, keyset, fs, ctx, pay, gen = _setup(vocab, b, 3)
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(b, vocab, generator=g, dtype=torch.float64) * 2
    deltas = [0.0, 1e-12, -1e-12, 1e-10, -1e-10, 1e-8, -1e-8, 5e-8, -5e-8, 2e-7, 1e-6, -1e-6]
    rng = random.Random(vocab)
    close = 0
    for r in range(b):
        gum = _gumbels(profile, keyset, ctx[r].tolist(), pay[r], vocab)
        row = logits[r].tolist()
        mx = max(row)
        scores = [(x - mx) + gj for x, gj in zip(row, gum, strict=True)]
        win = max(range(vocab), key=scores.__getitem__)
        # a runner-up whose G alone beats the winner's score: its new logit stays below the max
        pool = [j for j in range(vocab) if j != win and gum[j] > scores[win] + 1e-3]
        if not pool:
            continue
        other = rng.choice(pool)
        # x_other - mx + G_other = score_win + delta (mx unchanged: keep the new logit below the max)
        new = scores[win] + deltas[r] - gum[other] + mx
        if new >= mx:
            continue
        logits[r, other] = new
        x = logits[r].tolist()
        top2 = sorted(((v - mx) + gj for v, gj in zip(x, gum, strict=True)), reverse=True)[:2]
        close += top2[0] - top2[1] < 1e-7  # a call the default margin must send back
    assert close >= 6
    for dtype in (torch.float64, torch.float32):
        _check(fs, logits.to(dtype), ctx, pay, gen)


def test_fast_gumbel_meets_the_bound_its_margin_assumes():
    """|G_fast - G_libm| < 1e-12 (the margin is 1e-7) at both ends of the word range, powers of two and random
    words, on every kernel path this CPU has."""
    import numpy as np

    mod = cpu_kernel.load()
    rng = np.random.default_rng(0)
    ends = np.arange(0, 4096, dtype=np.uint64)
    u = np.concatenate([ends, (1 << 32) - 1 - ends, (1 << np.arange(32, dtype=np.uint64)),
                        (1 << np.arange(32, dtype=np.uint64)) - 1, rng.integers(0, 1 << 32, 100_000, dtype=np.uint64)])
    u = u.astype(np.uint32)
    want = np.array([-math.log(-math.log((float(w) + 0.5) / 4294967296.0)) for w in u.tolist()])
    prev = mod.isa()
    try:
        for isa in mod.isas():
            mod.isa(isa)
            out = np.empty(len(u))
            mod.fast_gumbel(u, out)
            assert float(np.abs(out - want).max()) < 1e-12, isa
    finally:
        mod.isa(prev)


@pytest.mark.parametrize("path", ["generic", "avx2", "avx512"])
def test_every_kernel_path_draws_the_same(path):
    """The portable build of the fast draw (no AVX2), the AVX2 one and the AVX-512 Philox give the same tokens."""
    mod = cpu_kernel.load()
    if path not in mod.isas():
        pytest.skip(f"this CPU has no {path} path")
    _, _, fs, ctx, pay, gen = _setup(49152, 6, 8)
    logits = torch.randn(6, 49152, generator=torch.Generator().manual_seed(8)) * 2
    logits[1] = logits[1].masked_fill(logits[1] < logits[1].topk(50).values[-1], float("-inf"))
    logits[3, 1001:] = float("-inf")  # a tile boundary mid-row, and a last tile not a multiple of 32
    want = _draws(fs, logits, ctx, pay, gen)["exact"]
    prev = mod.isa()
    try:
        mod.isa(path)
        assert _check(fs, logits, ctx, pay, gen) == want
    finally:
        mod.isa(prev)
