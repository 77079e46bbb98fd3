"""The fused generation step (gpu/step.py) on every backend against the reference: the frozen v1/v2 vectors,
random cases (interleaved layouts, masked logits, float32/float64), the mark rule of the reference
(`reference.is_marked`: first h tokens, repeated contexts), and unmarked rows drawing the plain distribution."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from gpu import cpu_kernel
from gpu.sampler import HeroSampler
from gpu.step import ContextLog, FusedSampler
from tests.helpers.triton_interpreter import assert_passes_interpreted
from verifier.engine import reference as R
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.payload import encode_payload
from verifier.engine.profile import profile_from_dict

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

native_ok = cpu_kernel.available() and hasattr(cpu_kernel.load(), "sample_step")
CPU_BACKENDS = [pytest.param("native", marks=pytest.mark.skipif(not native_ok, reason="C kernel not built")),
                "torch"]
has_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _softmax(logits: list[float]) -> list[float]:
    m = max(logits)
    e = [0.0 if x == float("-inf") else math.exp(x - m) for x in logits]
    z = sum(e)
    return [x / z for x in e]


def _one_step(fs: FusedSampler, logits, ctx, payload, backend, device="cpu", generated=None, log=None,
              generator=None):
    b = logits.shape[0]
    gen = torch.full((b,), fs.h, dtype=torch.int64, device=device) if generated is None else generated
    log = fs.new_log(b) if log is None else log
    return fs.step(logits.to(device), ctx.to(device), payload.to(device), gen, log, backend=backend,
                   with_marks=True, generator=generator)


def vector_cases() -> list[tuple]:
    """(FusedSampler args, logits [1, V] float64, context [1, h], payload [1, K, L], want token)."""
    cases = []
    v1 = json.loads((VECTORS / "hero_v1.json").read_text())
    for v in v1["sample"]:  # one key per level: a table of one entry, one segment
        keys = [bytes.fromhex(k) for k in v["keys"]]
        args = (tuple(v["schedule"]), 1, [[k] for k in keys], b"\x00" * 16, len(v["context"]), 1, 0)
        pay = torch.zeros(1, 1, len(keys), dtype=torch.int64)
        cases.append((args, [v["logits"]], [v["context"]], pay, v["token"]))
    v2 = json.loads((VECTORS / "hero_v2.json").read_text())
    for v in v2["sample"]:
        segs = v["segments"]
        profile = profile_from_dict({
            "name": "vec", "spec_version": 2, "vocab_size": v["vocab_size"], "segments": segs,
            "levels": [
                {"bits": b, **({"chunks": v["schedule"][i]} if i < len(v["schedule"]) else {}),
                 "fields": [{"name": f"f{i}", "bits": b * segs}]}
                for i, b in enumerate(v["bits"])
            ],
        })
        masters = [bytes.fromhex(m) for m in v["masters"]]
        ks = KeySet(tuple(derive_level_table(m, profile, lv, "t") for lv, m in enumerate(masters, start=1)))
        args = (profile.schedule, segs, [list(t.entries) for t in ks.tables], ks.position, len(v["context"]), 2, 0)
        pay = torch.tensor([encode_payload(profile, {f"f{i}": x for i, x in enumerate(v["values"])})])
        cases.append((args, [v["logits"]], [v["context"]], pay, v["token"]))
    return cases


def random_cases(seed: int = 0, n: int = 12) -> list[tuple]:
    """Random profiles (depths, interleaving, h), masked logits; the want token from the reference."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        vocab = rng.choice([37, 101, 600])
        sched = rng.choice([(), (3,), (4, 2), (7,), (20,)])
        stride = rng.choice([0, sched[0]]) if sched else 0
        h = rng.choice([1, 3, 4])
        segs = rng.choice([1, 3, 6])
        width = [rng.choice([1, 2, 4, 16]) for _ in range(len(sched) + 1)]
        tables = [[rng.randbytes(16) for _ in range(w)] for w in width]
        pos = rng.randbytes(16)
        b = 5
        logits = [[rng.gauss(0, 2) if rng.random() > 0.3 else float("-inf") for _ in range(vocab)] for _ in range(b)]
        for row in logits:
            row[rng.randrange(vocab)] = 1.0
        ctx = [[rng.randrange(vocab) for _ in range(h)] for _ in range(b)]
        pay = [[[rng.randrange(w) for w in width] for _ in range(segs)] for _ in range(b)]
        want = []
        for r in range(b):
            seg = R.position(R.prf_seed(pos, ctx[r]), segs)
            keys = [tables[lv][pay[r][seg][lv]] for lv in range(len(width))]
            want.append(R.hero_sample(_softmax(logits[r]), sched, keys, ctx[r], stride))
        cases.append(((sched, segs, tables, pos, h, rng.choice([1, 2]), stride), logits, ctx,
                      torch.tensor(pay), want))
    return cases


def _sampler(args, device="cpu") -> FusedSampler:
    sched, segs, tables, pos, h, spec, stride = args
    return FusedSampler(HeroSampler(sched, segs, tables, pos, device, stride=stride), h, spec)


def check_backend(backend: str, device: str = "cpu", dtypes=(torch.float64, torch.float32), n_random: int = 12) -> None:
    """Every vector and random case: the marked token equals the reference's (used by the subprocess tests)."""
    for args, logits, ctx, pay, want in vector_cases() + random_cases(n=n_random):
        fs = _sampler(args, device)
        want = want if isinstance(want, list) else [want]
        for dtype in dtypes:
            tokens, marks = _one_step(fs, torch.tensor(logits, dtype=dtype), torch.tensor(ctx), pay, backend, device)
            assert bool(marks.all())
            assert tokens.cpu().tolist() == want, (backend, dtype, args[0], args[-1])


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_step_matches_vectors_and_reference(backend):
    check_backend(backend)


def test_default_backend_on_cpu_is_native_when_built():
    from gpu.backend import select_backend

    assert select_backend("cpu", native="sample_step") == ("native" if native_ok else "torch")
    assert select_backend("cpu", native="no_such_entry_point") == "torch"  # an extension built from older source
    assert select_backend("meta") == "torch"
    with pytest.raises(ValueError):
        select_backend("cpu", "fortran")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("spec", [1, 2])
def test_marks_follow_the_repeated_context_rule(backend, spec):
    """Across steps, which rows are marked is exactly the reference's `is_marked` (repeats unmarked,
    spec v2 leaves the first h tokens unmarked); the log grows past its first capacity."""
    check_marks(backend, spec)


def check_marks(backend: str, spec: int, slotted: bool = False, steps: int = 20) -> None:
    """`slotted`: the rows' state sits at permuted slots of a larger state (a serving engine's layout)."""
    rng = random.Random(spec)
    h, b, vocab = 3, 4, 50
    args = ((4,), 2, [[rng.randbytes(16)], [rng.randbytes(16)]], rng.randbytes(16), h, spec, 0)
    fs = _sampler(args)
    n = b + 3 if slotted else b
    slots = torch.tensor([5, 0, 3, 1]) if slotted else None
    log = ContextLog.empty(n, h, capacity=2)
    gen = torch.zeros(n, dtype=torch.int64)
    seen: list[set] = [set() for _ in range(b)]
    payload = torch.zeros(n, 2, 2, dtype=torch.int64)

    for step in range(steps):
        ctx = torch.tensor([[rng.randrange(3) for _ in range(h)] for _ in range(b)])
        want = [R.is_marked(step, row, seen[i], spec) for i, row in enumerate(ctx.tolist())]
        log.ensure(step + 1)
        logits = torch.randn(b, vocab, dtype=torch.float64)
        _, marks = fs.step(logits, ctx, payload, gen, log, backend=backend, with_marks=True, slots=slots)
        assert marks.tolist() == want, step
    rows = slots if slotted else torch.arange(b)
    assert gen[rows].tolist() == [steps] * b
    assert log.counts[rows].tolist() == [len(s) for s in seen]
    assert int(gen.sum()) == steps * b  # other slots untouched
    assert log.capacity >= min(16, steps - 3)


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
def test_native_step_splits_rows_over_threads_with_the_same_draws():
    """A batch large enough for the threaded path (B * V >= 65,536): 1, 2 and 5 threads, and the torch step,
    draw the same tokens, marks and state, at slots permuted in a larger state (a serving engine's layout)."""
    rng = random.Random(9)
    b, n, vocab, h = 24, 30, 6000, 3
    args = ((20, 3), 4, [[rng.randbytes(16) for _ in range(w)] for w in (4, 8, 16)], rng.randbytes(16), h, 2, 20)
    fs = _sampler(args)
    slots = torch.tensor(rng.sample(range(n), b))
    payload = torch.tensor([[[rng.randrange(w) for w in (4, 8, 16)] for _ in range(4)] for _ in range(n)])
    logits = torch.randn(b, vocab, dtype=torch.float32) * 2
    logits[:, ::7] = float("-inf")
    ctx = torch.tensor([[rng.randrange(40) for _ in range(h)] for _ in range(b)])
    ctx[1] = ctx[0]  # a repeated context within a step: each row has its own slot, so both are marked
    outs = []
    for threads, backend in ((1, "native"), (2, "native"), (5, "native"), (1, "torch")):
        gen = torch.full((n,), 5, dtype=torch.int64)
        log = fs.new_log(n)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            tokens, marks = fs.step(logits, ctx, payload, gen, log, torch.Generator().manual_seed(1),
                                    backend=backend, with_marks=True, slots=slots)
        finally:
            torch.set_num_threads(before)
        outs.append((tokens.tolist(), marks.tolist(), gen.tolist(), log.counts.tolist(), log.words.tolist()))
    assert all(o == outs[0] for o in outs[1:3]) and outs[0][:4] == outs[3][:4] and all(outs[0][1])


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
@pytest.mark.parametrize("spec", [1, 2])
def test_native_fast_path_draws_the_exact_paths_tokens(spec):
    """The C step's fast path (vectorised exp, each routing decision taken only with a margin) draws the tokens
    of its exact path (libm exp, the spec's sequential sums): random batches with wide logit ranges (masses far
    below e^-708), masked tokens, flat rows (ties of masses), interleaved layouts, float32 and float64; and with
    a margin so wide that every decision goes back to the exact path."""
    mod = cpu_kernel.load()
    rng = random.Random(spec)
    cases = [(6000, (20, 3), 20, 2.0, torch.float32), (5000, (80,), 0, 8.0, torch.float64),
             (997, (7,), 13, 30.0, torch.float32), (3000, (4, 3), 0, 400.0, torch.float64)]
    try:
        for vocab, sched, stride, scale, dtype in cases:
            widths = [4, 8, 16][: len(sched) + 1]
            args = (sched, 3, [[rng.randbytes(16) for _ in range(w)] for w in widths], rng.randbytes(16), 3, spec,
                    stride)
            fs = _sampler(args)
            b = 40
            payload = torch.tensor([[[rng.randrange(w) for w in widths] for _ in range(3)] for _ in range(b)])
            logits = (torch.randn(b, vocab, dtype=torch.float64) * scale).to(dtype)
            logits[: b // 2, ::5] = float("-inf")
            logits[-1] = 0.0  # flat: every chunk of a level has the same mass
            logits[-2] = float("-inf")
            logits[-2, rng.randrange(vocab)] = 1.0  # one token left
            ctx = torch.tensor([[rng.randrange(vocab) for _ in range(3)] for _ in range(b)])
            got = {}
            for name, on, margin in (("exact", False, 1e-7), ("fast", True, 1e-7), ("every-fallback", True, 1e9)):
                mod.fast_step(on, margin)
                tokens, marks = _one_step(fs, logits, ctx, payload, "native")
                assert bool(marks.all())
                got[name] = tokens.tolist()
            assert got["fast"] == got["exact"] == got["every-fallback"], (vocab, sched, stride, scale)
            assert got["fast"][-2] == int(logits[-2].argmax())
    finally:
        mod.fast_step(True, 1e-7)


def _top_k_rows(b: int, vocab: int, k: int, low: float, gen: torch.Generator) -> torch.Tensor:
    """Rows as a top-k warp leaves them: k random tokens with logits ~ N(0, 3), the rest at `low` (-inf, or a
    finite value far below: whole blocks of the fused pass lie under its floor and are skipped)."""
    logits = torch.full((b, vocab), low, dtype=torch.float64)
    for r in range(b):
        idx = torch.randperm(vocab, generator=gen)[:k]
        logits[r, idx] = torch.randn(k, dtype=torch.float64, generator=gen) * 3
    return logits


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
@pytest.mark.parametrize("stride", [0, 9])
def test_native_fast_path_on_warped_rows(stride):
    """Rows with few live tokens (top-k at -inf; or the rest finite but 100-500 nats down, below the fused pass's
    floor; or just above it, where nothing is skipped): marked rows draw the exact path's tokens, and unmarked
    rows land on the exact scan's token for the same uniform (blocked inverse CDF vs one sequential scan)."""
    mod = cpu_kernel.load()
    rng = random.Random(11)
    gen = torch.Generator().manual_seed(11)
    vocab, b = 5000, 48
    fs = _sampler(((80,), 1, [[rng.randbytes(16) for _ in range(4)], [rng.randbytes(16) for _ in range(8)]],
                   rng.randbytes(16), 3, 2, stride))
    rows = [_top_k_rows(16, vocab, 50, low, gen) for low in (float("-inf"), -500.0, -99.0)]
    logits = torch.cat(rows)
    ctx = torch.tensor([[rng.randrange(vocab) for _ in range(3)] for _ in range(b)])
    payload = torch.tensor([[[rng.randrange(4), rng.randrange(8)]] for _ in range(b)])
    got: dict[str, list] = {}
    try:
        for name, on in (("exact", False), ("fast", True)):
            mod.fast_step(on, 1e-7)
            for dtype in (torch.float32, torch.float64):
                tokens, marks = _one_step(fs, logits.to(dtype), ctx, payload, "native")
                assert bool(marks.all())
                got.setdefault(name, []).append(tokens.tolist())
                unmarked = torch.zeros(b, dtype=torch.int64)  # generated < h: every row unmarked
                tokens, marks = _one_step(fs, logits.to(dtype), ctx, payload, "native", generated=unmarked,
                                          generator=torch.Generator().manual_seed(5))
                assert not bool(marks.any())
                got[name].append(tokens.tolist())
    finally:
        mod.fast_step(True, 1e-7)
    assert got["fast"] == got["exact"]
    live = torch.isfinite(logits) & (logits > -99.5)
    assert all(bool(live[r, t]) for draw in got["fast"] for r, t in enumerate(draw))  # a live token every time


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
def test_native_fast_exp_meets_the_bound_its_margin_assumes():
    """Relative error < 1e-14 against libm on [-708, 0] (every kernel path this CPU has); 0 below, and for
    -inf and NaN (the exact path's 0 for a warped-away token)."""
    import numpy as np

    mod = cpu_kernel.load()
    x = np.concatenate([np.linspace(-708.0, 0.0, 200_001), -np.logspace(-12, np.log10(708), 50_001),
                        np.random.default_rng(0).uniform(-708, 0, 200_000), [-0.0, 0.0]])
    want = np.exp(x)
    before = mod.isa()
    try:
        for path in mod.isas():
            mod.isa(path)
            got = x.copy()
            mod.fast_exp(got)
            assert float(np.max(np.abs(got / want - 1.0))) < 1e-14, path
            low = np.array([-708.5, -745.2, -1e4, -np.inf, np.nan])
            mod.fast_exp(low)
            assert low.tolist() == [0.0] * 5, path
    finally:
        mod.isa(before)


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
def test_native_fast_masses_meet_the_bounds_their_margins_assume():
    """The float32 tier's mass of a run (float32 exp, float lanes) is within 1e-5 of the true sum (its margin is
    1e-4), the double tier's within 1e-13: runs of 1 to 5,000 logits at every scale, the max anywhere in the run,
    values spread down to 120 below it (terms under e^-87 dropped), -inf and NaN entries (0)."""
    import numpy as np

    mod = cpu_kernel.load()
    rng = np.random.default_rng(4)
    worst = {"f32": 0.0, "f64": 0.0}
    for case in range(400):
        n = int(rng.integers(1, 5000))
        mx = float(np.float32(rng.choice([0.0, 1.0, -3.5, 37.25, -1e3, 4e4]) * rng.uniform(0.5, 1.5)))
        spread = float(rng.choice([0.5, 5.0, 30.0, 90.0, 120.0]))
        x = (mx - rng.uniform(0, spread, n)).astype(np.float32)
        x[int(rng.integers(n))] = np.float32(mx)
        if case % 3 == 0 and n > 3:
            x[rng.integers(n, size=n // 3)] = -np.inf
            x[int(rng.integers(n))] = np.nan
        mx = float(np.max(x[np.isfinite(x)]))
        d = x.astype(np.float64) - mx
        want = math.fsum(float(v) for v in np.exp(d[np.isfinite(d)]))
        for tier in ("f32", "f64"):
            got = mod.fast_mass(x.tobytes(), mx, tier)
            if got is not None:
                worst[tier] = max(worst[tier], abs(got / want - 1.0))
    assert worst["f32"] < 1e-5 and worst["f64"] < 1e-13, worst


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_fast_path_agrees_on_close_calls(dtype):
    """Small chunks, so a chunk's mass is a few exps and many decisions are close: 20,000 rows draw the exact
    path's tokens, on the double tier (float64 logits, 2 tokens a chunk) and on the float32 tier first (float32,
    16 tokens a chunk: its eight-lane pass). An exp off by 1e-2 in one lane of eight fails it: checked by mutation."""
    mod = cpu_kernel.load()
    rng = random.Random(5)
    fs = _sampler(((64,), 1, [[rng.randbytes(16)], [rng.randbytes(16)]], rng.randbytes(16), 3, 2, 0))
    b, vocab = 20_000, 128 if dtype == torch.float64 else 1024
    logits = (torch.randn(b, vocab, dtype=torch.float64) * 0.3).to(dtype)
    ctx = torch.tensor([[rng.randrange(vocab) for _ in range(3)] for _ in range(b)])
    payload = torch.zeros(b, 1, 2, dtype=torch.int64)
    got = []
    try:
        for on in (False, True):
            mod.fast_step(on, 1e-7)
            got.append(_one_step(fs, logits, ctx, payload, "native")[0].tolist())
    finally:
        mod.fast_step(True, 1e-7)
    assert got[0] == got[1]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_state_is_kept_per_slot(backend):
    check_marks(backend, 2, slotted=True)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_unmarked_rows_draw_the_plain_distribution(backend):
    rng = random.Random(3)
    args = ((3,), 1, [[rng.randbytes(16)], [rng.randbytes(16)]], rng.randbytes(16), 3, 2, 2)
    fs = _sampler(args)
    n, v = 20000, 10
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(1, v, generator=g) * 1.5
    logits[0, 4] = float("-inf")
    gen = torch.zeros(n, dtype=torch.int64)  # spec v2, generated < h: every row unmarked
    tokens, marks = fs.step(logits.expand(n, v).contiguous(), torch.zeros(n, 3, dtype=torch.int64),
                            torch.zeros(n, 1, 2, dtype=torch.int64), gen, fs.new_log(n), generator=g,
                            backend=backend, with_marks=True)
    assert not bool(marks.any())
    freq = torch.bincount(tokens, minlength=v).double()
    p = torch.softmax(logits[0].double(), 0)
    assert freq[4] == 0
    keep = p > 0
    chi2 = float(((freq[keep] - n * p[keep]) ** 2 / (n * p[keep])).sum())
    assert chi2 < 33.7  # 8 dof: P(chi2 > 33.7) ~ 5e-5


def test_bad_payload_value_is_refused():
    if not native_ok:
        pytest.skip("C kernel not built")
    fs = _sampler(((), 1, [[b"\x01" * 16]], b"\x02" * 16, 3, 2, 0))
    with pytest.raises(ValueError, match="payload"):
        _one_step(fs, torch.zeros(1, 5), torch.zeros(1, 3, dtype=torch.int64), torch.tensor([[[7]]]), "native")


def test_repr_holds_no_key_material():
    key = bytes(range(16))
    fs = _sampler(((), 1, [[key]], key, 3, 2, 0))
    assert "FusedSampler(" in repr(fs) and key.hex() not in repr(fs) and str(int.from_bytes(key[:8], "little")) \
        not in repr(fs)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_triton_step_in_interpreter():
    """The Triton kernel on the CPU through TRITON_INTERPRET=1 (own process: the flag is read at import)."""
    code = ("import sys; sys.path.insert(0, 'tests/gpu'); import test_fused_step as t\n"
            "t.check_backend('triton', dtypes=(__import__('torch').float64,), n_random=6)\n"
            "for spec in (1, 2):\n    t.check_marks('triton', spec, steps=8)\n"
            "t.check_marks('triton', 2, slotted=True, steps=8)\n"
            "t.check_v3('triton', dtypes=(__import__('torch').float64,))\n"
            "import test_opening\ntest_opening.check_gate('triton', True)\n"
            "print('ok')\n")
    assert_passes_interpreted(code, timeout=900)


@has_cuda
@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_step_on_cuda_matches_reference(backend):
    check_backend(backend, device="cuda")


@has_cuda
@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_v3_step_on_cuda_matches_the_frozen_vectors():
    for backend in ("triton", "torch"):
        for fs, logits, ctx, pay, want in _v3_cases("cuda"):
            tokens, marks = _one_step(fs, torch.tensor(logits, dtype=torch.float64), torch.tensor(ctx), pay,
                                      backend, device="cuda")
            assert bool(marks.all()) and tokens.cpu().tolist() == [want], backend


def _v3_cases(device: str = "cpu"):
    """Spec v3's frozen sample vectors: (FusedSampler over the engine's v3 sampler, logits, context, payload, token)."""
    from verifier.engine.fused import make_sampler

    out = []
    for v in json.loads((VECTORS / "hero_v3.json").read_text())["sample"]:
        segs = v["segments"]
        profile = profile_from_dict({
            "name": "vec", "spec_version": 3, "vocab_size": v["vocab_size"], "segments": segs,
            "levels": [{"bits": b, "encoding": "value", **({"chunks": v["schedule"][i]} if i < len(v["schedule"])
                                                           else {}), "fields": [{"name": f"f{i}", "bits": b * segs}]}
                       for i, b in enumerate(v["bits"])],
        })
        masters = [bytes.fromhex(m) for m in v["masters"]]
        ks = KeySet(tuple(derive_level_table(m, profile, lv, "t") for lv, m in enumerate(masters, start=1)))
        fs = FusedSampler(make_sampler(profile, ks, device), len(v["context"]), 3)
        pay = torch.tensor([encode_payload(profile, {f"f{i}": x for i, x in enumerate(v["values"])})])
        out.append((fs, [v["logits"]], [v["context"]], pay, v["token"]))
    return out


@pytest.mark.parametrize("backend", [None, *CPU_BACKENDS])
def test_v3_step_matches_the_frozen_vectors(backend):
    """Spec v3 in the fused step (what the vLLM plugin and HeroWatermarkingConfig call): the default backend
    (native on a CPU with the C kernel built), the C and the torch steps give the frozen v3 token (the Triton
    step: `test_triton_step_in_interpreter`)."""
    check_v3(backend)


def check_v3(backend: str | None, dtypes=(torch.float64, torch.float32)) -> None:
    cases = _v3_cases()
    assert cases
    for fs, logits, ctx, pay, want in cases:
        for dtype in dtypes:
            tokens, marks = _one_step(fs, torch.tensor(logits, dtype=dtype), torch.tensor(ctx), pay, backend)
            assert bool(marks.all()) and tokens.tolist() == [want], (backend, dtype)


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
def test_v3_native_step_agrees_with_torch_on_random_batches():
    """Beyond the vectors: v3 profiles of several shapes, batches with masked logits, threads."""
    from verifier.engine.fused import make_sampler

    rng = random.Random(3)
    for vocab, sched, bits in [(600, (7,), (2, 3)), (4000, (20,), (2, 3)), (1000, (4, 3), (1, 2, 2))]:
        segs = 4
        profile = profile_from_dict({
            "name": "r", "spec_version": 3, "vocab_size": vocab, "segments": segs,
            "levels": [{"bits": b, "encoding": "value", **({"chunks": sched[i]} if i < len(sched) else {}),
                        "fields": [{"name": f"f{i}", "bits": b * segs}]} for i, b in enumerate(bits)],
        })
        ks = KeySet(tuple(derive_level_table(rng.randbytes(32), profile, lv, "t") for lv in range(1, len(bits) + 1)))
        fs = FusedSampler(make_sampler(profile, ks), 3, 3)
        b = 20
        pay = torch.tensor([encode_payload(profile, {f"f{i}": rng.randrange(1 << (x * segs))
                                                     for i, x in enumerate(bits)}) for _ in range(b)])
        logits = torch.randn(b, vocab, dtype=torch.float64) * 2
        logits[:, ::5] = float("-inf")
        ctx = torch.tensor([[rng.randrange(vocab) for _ in range(3)] for _ in range(b)])
        got = [_one_step(fs, logits, ctx, pay, be)[0].tolist() for be in ("native", "torch")]
        assert got[0] == got[1], (vocab, sched)
