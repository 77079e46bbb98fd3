"""The gated opening (gpu/opening.py): rows stay unmarked until the surprisal of their fresh tokens reaches
`nats` (or `cap` tokens pass), the same on every step path; an ended opening is improbable, and identical
requests stop coinciding."""

from __future__ import annotations

import math
import random

import pytest
import torch

from gpu.opening import OpeningGate, token_surprisal
from gpu.sampler import HeroSampler
from gpu.step import ContextLog, FusedSampler
from tests.gpu.test_fused_step import CPU_BACKENDS, has_cuda
from verifier.engine import reference as R
from verifier.engine.fused import new_opening
from verifier.engine.profile import profile_from_dict


def test_token_surprisal_in_nats():
    inf = float("-inf")
    x = torch.tensor([[0.0] * 4, [0.0, inf, 0.0, inf], [5.0, inf, inf, inf]])
    got = token_surprisal(x, torch.tensor([3, 2, 0]))
    assert torch.allclose(got, torch.tensor([math.log(4), math.log(2), 0.0]), atol=1e-6)
    p = torch.tensor([0.7, 0.2, 0.1])
    assert abs(float(token_surprisal(p.log().unsqueeze(0).half(), torch.tensor([2]))[0]) - math.log(10)) < 2e-3


@pytest.mark.parametrize("select", [True, False])
def test_gate_opens_once_the_opening_is_improbable_enough(select):
    """Both ways of accounting (the held rows only: the CPU's; every row masked: a device's) give this."""
    gate = OpeningGate.new(2, nats=4.0, cap=10)
    uniform4 = torch.zeros(2, 4)  # ln 4 = 1.386 nats per token
    uniform4[1, 1:] = float("-inf")  # row 1: one live token, no surprisal: held until the cap
    slots, tokens = torch.arange(2), torch.tensor([1, 0])
    held = []
    for g in range(12):
        h = gate.held(torch.full((2,), g), slots)
        gate.account(uniform4, tokens, h, slots, select)
        held.append(h.tolist())
    assert [h[0] for h in held] == [True, True, True] + [False] * 9  # 3 x 1.386 >= 4 after the third
    assert [h[1] for h in held] == [True] * 10 + [False] * 2  # the cap
    assert gate.need[0] == pytest.approx(4.0 - 3 * math.log(4)) and gate.need[1] == pytest.approx(4.0)
    gate.reset([0])
    assert bool(gate.held(torch.tensor([0, 11]), slots)[0])
    gate.reset([0], opened=True)
    assert not bool(gate.held(torch.tensor([0, 11]), slots)[0])
    off = OpeningGate.new(2, nats=0.0)
    assert not off.held(torch.zeros(2), slots).any()
    with pytest.raises(ValueError):
        OpeningGate.new(1, nats=-1.0)


def test_an_ended_opening_is_improbable():
    """The bound the gate rests on: every opening it ends has probability <= e^-nats, so identical requests
    share one with probability <= e^-nats. Monte Carlo over a skewed 3-token model: the rate at which two
    independent runs share their opening, against the bound."""
    gate_nats, runs = 3.0, 4000
    logits = torch.tensor([[2.0, 0.0, -1.0]]).expand(runs, 3)
    p = torch.softmax(logits[0], 0)
    g = torch.Generator().manual_seed(0)
    openings = []
    gate = OpeningGate.new(runs, nats=gate_nats, cap=50)
    slots = torch.arange(runs)
    seqs = [[] for _ in range(runs)]
    for step in range(50):
        held = gate.held(torch.full((runs,), step), slots)
        if not held.any():
            break
        tok = torch.multinomial(p.expand(runs, 3), 1, generator=g).squeeze(1)
        gate.account(logits, tok, held, slots)
        for r in held.nonzero().squeeze(1).tolist():
            seqs[r].append(int(tok[r]))
    openings = [tuple(s) for s in seqs]
    prob = {o: math.prod(float(p[t]) for t in o) for o in set(openings)}
    assert max(prob.values()) <= math.exp(-gate_nats) + 1e-9  # every ended opening
    shared = sum(openings[i] == openings[i + 1] for i in range(0, runs, 2)) / (runs // 2)
    assert shared <= math.exp(-gate_nats) * 1.3  # 0.05 bound; tokens of the 2.0-logit kind alone: 0.22


def test_spec_v1_and_zero_nats_have_no_gate():
    assert new_opening(_profile(1), 3) is None
    assert new_opening(_profile(2), 3, nats=0) is None
    assert new_opening(_profile(3), 3).need.tolist() == [8.0] * 3


def _profile(spec: int):
    return profile_from_dict({"name": "t", "spec_version": spec, "vocab_size": 50, "segments": 2, "context_width": 3,
                              "levels": [{"bits": 2, "chunks": 4, "fields": [{"name": "a", "bits": 4}]},
                                         {"bits": 1, "fields": [{"name": "b", "bits": 2}]}]})


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("slotted", [False, True])
def test_fused_step_holds_the_same_rows_as_the_reference(backend, slotted):
    """Marks of the fused step with a gate == the reference's `is_marked` with a gate of its own on the same logits;
    `generated` still counts every token; some row is held past the first h tokens (the gate did something)."""
    check_gate(backend, slotted)


@has_cuda
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_gate_on_cuda_holds_the_same_rows(backend):
    check_gate(backend, True, "cuda")


def check_gate(backend: str, slotted: bool, device: str = "cpu") -> None:
    rng = random.Random(4)
    h, b, vocab = 3, 4, 50
    fs = FusedSampler(HeroSampler((4,), 2, [[rng.randbytes(16)], [rng.randbytes(16)]], rng.randbytes(16), device),
                      h, 2)
    n = b + 3 if slotted else b
    slots = (torch.tensor([5, 0, 3, 1]) if slotted else torch.arange(b)).to(device)
    log, gen = ContextLog.empty(n, h, device), torch.zeros(n, dtype=torch.int64, device=device)
    gate, ref_gate = OpeningGate.new(n, nats=6.0, cap=12, device=device), OpeningGate.new(b, nats=6.0, cap=12)
    seen: list[set] = [set() for _ in range(b)]
    payload = torch.zeros(n, 2, 2, dtype=torch.int64, device=device)
    g = torch.Generator().manual_seed(1)
    held_past_h = 0
    for step in range(16):
        ctx = torch.tensor([[rng.randrange(40) for _ in range(h)] for _ in range(b)])
        logits = torch.randn(b, vocab, generator=g, dtype=torch.float64) * 3  # ~1-2 nats a token
        want = ref_gate.held(torch.full((b,), step), torch.arange(b))
        if step >= h:
            held_past_h += int(want.sum())
        want_marks = [R.is_marked(step, row, seen[i], 2, held=w)
                      for i, (row, w) in enumerate(zip(ctx.tolist(), want.tolist(), strict=True))]
        log.ensure(step + 1)
        tokens, marks = fs.step(logits.to(device), ctx.to(device), payload, gen, log, backend=backend,
                                with_marks=True, slots=slots, opening=gate)
        ref_gate.account(logits, tokens.cpu(), want, torch.arange(b))
        assert marks.cpu().tolist() == want_marks, step
    assert held_past_h > 0
    assert gen[slots].tolist() == [16] * b and int(gen.sum()) == 16 * b
    assert torch.allclose(gate.need[slots].cpu(), ref_gate.need, atol=1e-5)


def _identical_requests(nats: float, backend: str | None, n: int = 20, steps: int = 16) -> int:
    """Distinct outputs of n identical requests (same prompt, payload, keys) on a fixed low-entropy model."""
    rng = random.Random(7)
    h, vocab = 3, 4 * steps
    fs = FusedSampler(HeroSampler((4,), 2, [[rng.randbytes(16)], [rng.randbytes(16)]], rng.randbytes(16)), h, 2)
    out = torch.zeros(n, h, dtype=torch.int64)  # the same prompt tail for every request
    gen, log, pay = torch.zeros(n, dtype=torch.int64), fs.new_log(n), torch.zeros(n, 2, 2, dtype=torch.int64)
    gate = OpeningGate.new(n, nats=nats)
    g = torch.Generator().manual_seed(2)
    for step in range(steps):
        # 1.3 nats a token on average, tokens of this step only: no context repeats (a repeat is drawn fresh)
        logits = torch.full((n, vocab), float("-inf"), dtype=torch.float64)
        logits[:, 4 * step: 4 * step + 4] = torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64)
        log.ensure(step + 1)
        tok = fs.step(logits, out[:, -h:], pay, gen, log, g, backend=backend, opening=gate)
        out = torch.cat([out, tok.unsqueeze(1)], dim=1)
    return len({tuple(r) for r in out[:, h:].tolist()})


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_identical_requests_stop_coinciding(backend):
    """Spec v2's rule alone (the first h = 3 tokens fresh, 3.9 nats) lets identical requests coincide; the
    gate at 8 nats makes them as distinct as plain sampling would (20 of 20 on this model)."""
    without, with_gate = _identical_requests(0.0, backend), _identical_requests(8.0, backend)
    assert without <= 18  # 190 pairs x e^-3.9 = 3.8 expected coincident pairs
    assert with_gate == 20


def test_engine_processor_applies_the_gate():
    """`HeroLogitsProcessor` (hero generate, the SDK) holds gated rows unmarked and accounts their surprisal."""
    from verifier.engine.keys import KeySet, derive_level_table
    from verifier.provider.generation import HeroLogitsProcessor

    profile = _profile(3)
    ks = KeySet(tuple(derive_level_table(bytes([lv]) * 32, profile, lv, "v") for lv in (1, 2)))
    proc = HeroLogitsProcessor(profile, ks, [{"a": 0, "b": 0}] * 2, opening_nats=3.0)
    seq = torch.tensor([[9, 9, 9, 1, 2, 3], [9, 9, 9, 4, 5, 6]])
    proc.prompt_length = 1  # five tokens drawn: past the first h
    proc(seq, torch.zeros(2, profile.vocab_size))  # ln 50 = 3.9 nats a token: one fresh step opens it
    assert proc.log.counts.tolist() == [0, 0]  # held: fresh, nothing logged
    assert (proc.opening.need < 0).all()
    proc(seq, torch.zeros(2, profile.vocab_size))
    assert proc.log.counts.tolist() == [1, 1]  # open: marked, logged
