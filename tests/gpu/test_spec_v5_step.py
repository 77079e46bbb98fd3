"""Spec v5 (position-multiplexed levels, docs/spec.md section 19) in the fused generation step on every backend:
the C step (gpu/_native/hero_kernels.c `sample_step`) and the Triton step (under its interpreter) draw the torch
step's tokens, marks and state bit for bit, and every marked row is the reference's `v5_sample`: random warped
logits (top-k rows at -inf, float32 and float64, V = 1,000 and the real 49,152), slots permuted in a larger
state, generated counts on both sides of the front (front_tokens = 50), and a three-level profile so that every
deeper level is drawn. v1-v4 call paths (no multiplex arguments) keep working."""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from gpu import cpu_kernel
from tests.helpers.keys import fixed_keyset
from tests.helpers.triton_interpreter import assert_passes_interpreted
from verifier.engine import reference as R
from verifier.engine.fused import make_fused_sampler
from verifier.engine.payload import encode_payload
from verifier.engine.profile import profile_from_dict, resolve_profile

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

native_ok = cpu_kernel.available() and hasattr(cpu_kernel.load(), "sample_step")
needs_native = pytest.mark.skipif(not native_ok, reason="C kernel not built")

# A deeper v5 profile: three levels, so lanes past the public share split between levels 2 and 3.
DEEP = {
    "name": "v5-deep", "spec_version": 5, "vocab_size": 49152, "context_width": 3, "segments": 4,
    "multiplex": {"front_tokens": 50, "front_public": 80, "public": 30},
    "levels": [{"bits": 2, "fields": [{"name": "model", "bits": 8}]},
               {"bits": 2, "fields": [{"name": "team", "bits": 8}]},
               {"bits": 3, "fields": [{"name": "user", "bits": 12}]}],
}
# generated counts before the step: < h (unmarked), both sides of the front, far past it
GENERATED = [0, 2, 3, 10, 48, 49, 50, 51, 52, 75, 120, 400]


def _profiles() -> dict:
    return {"v5": resolve_profile("v5"), "deep": profile_from_dict(DEEP)}


def _values(profile, rng: random.Random) -> dict[str, int]:
    return {f.name: rng.randrange(1 << f.bits) if lv.issued is None or i else rng.choice(lv.issued)
            for lv in profile.levels for i, f in enumerate(lv.fields)}


def _case(profile, b: int, n: int, vocab: int, dtype, seed: int):
    """(logits [b, V], contexts [b, h], payload [n, K, L], generated [n], slots [b]): random logits ~ N(0, 2.5),
    a third of the rows top-k warped (the rest -inf), one row with a single live token, one all -inf."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, vocab, generator=g, dtype=torch.float64) * 2.5
    for r in range(0, b, 3):
        kth = logits[r].topk(rng.choice([1, 5, 40])).values[-1]
        logits[r] = logits[r].masked_fill(logits[r] < kth, float("-inf"))
    logits[1] = float("-inf")
    logits[1, rng.randrange(vocab)] = 0.5
    if b > 4:
        logits[4] = float("-inf")
    h = profile.context_width
    ctx = torch.tensor([[rng.randrange(vocab) for _ in range(h)] for _ in range(b)])
    pay = torch.tensor([encode_payload(profile, _values(profile, rng)) for _ in range(n)])
    # every segment of a v5 payload holds the same whole values; other (valid) values in segments 1.. show that
    # each backend reads segment 0, never the lane's segment
    other = torch.tensor([encode_payload(profile, _values(profile, rng)) for _ in range(n)])
    pay[:, 1:] = other[:, 1:]
    gen = torch.tensor([rng.choice(GENERATED) for _ in range(n)], dtype=torch.int64)
    slots = torch.tensor(rng.sample(range(n), b))
    gen[slots[: len(GENERATED)]] = torch.tensor(GENERATED[:b])  # every count drawn at least once
    return logits.to(dtype), ctx, pay, gen, slots


def _run(fs, backend: str, logits, ctx, pay, gen, slots, log=None):
    """One step on copies of the state: (tokens, marks, generated after, log counts, log words)."""
    gen = gen.clone()
    log = fs.new_log(gen.shape[0]) if log is None else copy.deepcopy(log)
    tokens, marks = fs.step(logits, ctx, pay, gen, log, torch.Generator().manual_seed(3), backend=backend,
                            with_marks=True, slots=slots)
    return tokens.tolist(), marks.tolist(), gen.tolist(), log.counts.tolist(), log.words.tolist()


def _levels(profile, keyset, ctx, gen_rows) -> list[int]:
    """1-based level of each row by the reference (lane, public share at its generator index)."""
    pos = keyset.position
    return [R.v5_level(R.v5_lane(pos, c), profile.multiplex.public_percent(int(t)), profile.depth)
            for c, t in zip(ctx.tolist(), gen_rows.tolist(), strict=True)]


def check_backend_equals_torch(backend: str, cases) -> None:
    """`cases`: (profile name, b, n, vocab, dtype, seed); the backend's step equals torch's on every output
    (unmarked rows compared only where both backends draw the same: their marks, the state)."""
    profiles = _profiles()
    for name, b, n, vocab, dtype, seed in cases:
        profile = profiles[name]
        fs = make_fused_sampler(profile, fixed_keyset(profile, seed))
        logits, ctx, pay, gen, slots = _case(profile, b, n, vocab, dtype, seed)
        got, want = _run(fs, backend, logits, ctx, pay, gen, slots), _run(fs, "torch", logits, ctx, pay, gen, slots)
        marks = want[1]
        assert got[1:] == want[1:], (backend, name, vocab, dtype)
        assert [t for t, m in zip(got[0], marks) if m] == [t for t, m in zip(want[0], marks) if m], \
            (backend, name, vocab, dtype)
        assert 0 < sum(marks) < b  # marked and unmarked rows in every batch


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,vocab", [("v5", 1000), ("v5", 49152), ("deep", 1000), ("deep", 49152)])
def test_native_step_equals_torch(name, vocab, dtype):
    """Tokens, marks, counters and the context log; B * V large enough for the threaded rows at V = 49,152."""
    check_backend_equals_torch("native", [(name, 24, 40, vocab, dtype, 7 + vocab % 13)])


@needs_native
def test_native_step_equals_torch_across_the_front():
    """Seventy steps of one batch (teacher-forced contexts: a context repeats, so its row goes unmarked): every
    slot's counter crosses front_tokens = 50 in the step state itself, the public share switches at the index."""
    profile = _profiles()["deep"]
    keyset = fixed_keyset(profile, 2)
    fs = make_fused_sampler(profile, keyset)
    rng = random.Random(2)
    b, vocab, h = 6, 700, profile.context_width
    g = torch.Generator().manual_seed(2)
    text = torch.randint(0, 6, (b, 90), generator=g)  # 216 trigrams: some contexts repeat
    pay = torch.tensor([encode_payload(profile, _values(profile, rng)) for _ in range(b)])
    state = {be: (torch.zeros(b, dtype=torch.int64), fs.new_log(b, capacity=128)) for be in ("native", "torch")}
    seen_levels: set[tuple[bool, int]] = set()
    for t in range(70):
        logits = (torch.randn(b, vocab, generator=g) * 2).to(torch.float32)
        ctx = text[:, t : t + h].contiguous()
        levels = _levels(profile, keyset, ctx, state["torch"][0])
        out = {}
        for be, (gen, log) in state.items():
            out[be] = fs.step(logits, ctx, pay, gen, log, backend=be, with_marks=True)
        marks = out["torch"][1]
        assert torch.equal(out["native"][1], marks)
        assert torch.equal(out["native"][0][marks], out["torch"][0][marks]), t
        seen_levels |= {(t < 50, lv) for lv, m in zip(levels, marks.tolist(), strict=True) if m}
    assert torch.equal(state["native"][0], state["torch"][0]) and state["native"][0].tolist() == [70] * b
    assert torch.equal(state["native"][1].counts, state["torch"][1].counts)
    assert {lv for front, lv in seen_levels if not front} == {1, 2, 3}  # after the front: every level drawn


@pytest.mark.parametrize("backend", [pytest.param("native", marks=needs_native), "torch"])
@pytest.mark.parametrize("name", ["v5", "deep"])
def test_marked_rows_are_the_reference_draw(backend, name):
    """Every marked row is `reference.v5_sample` (small V: the reference is slow), both dtypes; the batch
    draws every level of the profile, public and deeper."""
    profile = _profiles()[name]
    keyset = fixed_keyset(profile, 5)
    fs = make_fused_sampler(profile, keyset)
    drawn: set[int] = set()
    for dtype, seed in ((torch.float64, 11), (torch.float32, 12)):
        logits, ctx, pay, gen, slots = _case(profile, 30, 36, 257, dtype, seed)
        tokens, marks, *_ = _run(fs, backend, logits, ctx, pay, gen, slots)
        levels = _levels(profile, keyset, ctx, gen[slots])
        for r in range(30):
            if not marks[r]:
                continue
            vals = pay[slots[r], 0].tolist()  # segment 0's entry: every segment holds the whole values
            row = logits[r].to(torch.float64).tolist()
            top = max(row)
            z = sum(math.exp(x - top) for x in row if x != float("-inf"))
            probs = [0.0 if x == float("-inf") else math.exp(x - top) / z for x in row]
            want = R.v5_sample(probs, [t.entries[v] for t, v in zip(keyset.tables, vals, strict=True)],
                               [t.level_key for t in keyset.tables], keyset.position, ctx[r].tolist(),
                               profile.multiplex.public_percent(int(gen[slots[r]])))
            assert tokens[r] == want, (backend, name, dtype, r, levels[r])
            drawn.add(levels[r])
    assert drawn == set(range(1, profile.depth + 1))


@needs_native
def test_only_the_drawn_level_moves_the_token():
    """Changing the deepest value moves only rows whose lane carries the deepest level; changing level 1's moves
    only public rows (each marked row draws under exactly one level's key, whole-vocabulary Gumbel-max)."""
    profile = _profiles()["deep"]
    keyset = fixed_keyset(profile, 4)
    fs = make_fused_sampler(profile, keyset)
    b = 200
    logits, ctx, _, _, _ = _case(profile, b, b, 2000, torch.float64, 4)
    logits = torch.randn(b, 2000, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 0.5  # flat
    gen = torch.full((b,), 60, dtype=torch.int64)
    base = {"model": 3, "team": 9, "user": 1000}
    levels = _levels(profile, keyset, ctx, gen)
    tok = {}
    for key, val in (("base", None), ("model", 200), ("user", 2000)):
        pay = torch.tensor([encode_payload(profile, {**base, **({key: val} if val is not None else {})})] * b)
        tok[key] = _run(fs, "native", logits, ctx, pay, gen, torch.arange(b))[0]
    for key, lv in (("model", 1), ("user", 3)):
        moved = {r for r in range(b) if tok[key][r] != tok["base"][r]}
        assert moved <= {r for r in range(b) if levels[r] == lv}, key
        assert len(moved) > 0.8 * levels.count(lv), key  # flat rows: a new key moves almost every such row


@needs_native
def test_native_step_refuses_a_v5_call_without_its_multiplex():
    profile = _profiles()["v5"]
    fs = make_fused_sampler(profile, fixed_keyset(profile, 1))
    logits, ctx, pay, gen, slots = _case(profile, 6, 6, 300, torch.float64, 1)
    bare = copy.copy(fs)
    bare.multiplex = None  # the C step then gets no multiplex arguments
    with pytest.raises(ValueError, match="spec 5 needs"):
        _run(bare, "native", logits, ctx, pay, gen, slots)
    bad = pay.clone()
    bad[:, 0, 1] = 1 << 12  # outside the user level's table (any level of segment 0, as the torch step)
    with pytest.raises(ValueError, match="payload"):
        _run(fs, "native", logits, ctx, bad, gen, slots)
    assert fs.multiplex == (50, 100, 50)


@pytest.mark.parametrize("backend", [pytest.param("native", marks=needs_native), "torch"])
@pytest.mark.parametrize("spec", [1, 2, 3, 4])
def test_v1_to_v4_steps_take_their_own_path(backend, spec):
    """Spec v1-v4 samplers hold no multiplex and call the C step without its arguments; they draw as before
    (native == torch on a routed profile)."""
    profile = profile_from_dict({
        "name": "r", "spec_version": spec, "vocab_size": 3000, "context_width": 3, "segments": 2,
        "levels": [{"bits": 2, "chunks": 20, **({"encoding": "value"} if spec >= 3 else {}),
                    "fields": [{"name": "model", "bits": 4}]},
                   {"bits": 3, **({"encoding": "value"} if spec >= 2 else {}),
                    "fields": [{"name": "user", "bits": 6}]}],
    })
    fs = make_fused_sampler(profile, fixed_keyset(profile, spec))
    assert fs.multiplex is None and fs.spec_version == spec
    rng = random.Random(spec)
    b = 12
    logits = torch.randn(b, 3000, generator=torch.Generator().manual_seed(spec), dtype=torch.float64)
    ctx = torch.tensor([[rng.randrange(3000) for _ in range(3)] for _ in range(b)])
    pay = torch.tensor([encode_payload(profile, {"model": rng.randrange(16), "user": rng.randrange(64)})
                        for _ in range(b)])
    gen = torch.full((b,), 10, dtype=torch.int64)
    got = _run(fs, backend, logits, ctx, pay, gen, torch.arange(b))
    want = _run(fs, "torch", logits, ctx, pay, gen, torch.arange(b))
    assert all(got[1]) and got == want


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_triton_step_in_interpreter():
    """The Triton step on the CPU through TRITON_INTERPRET=1 (own process: the flag is read at import), small
    batches of both profiles and dtypes against the torch step."""
    code = ("import sys, torch; sys.path.insert(0, '.'); import tests.gpu.test_spec_v5_step as t\n"
            "t.check_backend_equals_torch('triton', [('v5', 12, 16, 1000, torch.float64, 1),\n"
            "    ('deep', 12, 16, 1000, torch.float32, 2), ('deep', 12, 14, 3000, torch.float64, 3)])\n"
            "print('ok')\n")
    assert_passes_interpreted(code, timeout=600)
