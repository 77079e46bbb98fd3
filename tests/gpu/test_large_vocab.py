"""Large vocabularies (Gemma-3, V = 262,144): the C, torch and Triton (interpreter) generation steps draw the
same tokens for spec v2, v3 and v4 on random logits, and the decode evidence kernels agree at that width."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import yaml

from gpu import cpu_kernel, torch_kernel
from gpu.step import FusedSampler
from tests.helpers.triton_interpreter import assert_passes_interpreted
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.payload import encode_payload
from verifier.engine.profile import PROFILES_DIR, Profile, profile_from_dict

ROOT = Path(__file__).resolve().parents[2]
V = 262_144  # Gemma-3's vocabulary (verifier.lm.VOCAB_SIZES["gemma3-270m"])
SHIPPED = {2: "default", 3: "v3", 4: "v4"}  # a shipped profile of each spec version, widened to V

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

native_ok = cpu_kernel.available() and hasattr(cpu_kernel.load(), "sample_step")


def wide_profile(spec: int) -> Profile:
    data = yaml.safe_load((PROFILES_DIR / f"{SHIPPED[spec]}.yaml").read_text())
    data.update(vocab_size=V, tokenizer="gemma3-270m")
    profile = profile_from_dict(data)
    assert profile.spec_version == spec
    return profile


def step_case(spec: int, rows: int = 8, seed: int = 0, device: str = "cpu"):
    """(FusedSampler, logits [rows, V] float64, contexts, payloads, generated) for one watermarked step."""
    from verifier.engine.fused import make_sampler

    rng = random.Random(seed * 10 + spec)
    profile = wide_profile(spec)
    ks = KeySet(tuple(derive_level_table(rng.randbytes(32), profile, lv, "t")
                      for lv in range(1, profile.depth + 1)))
    fs = FusedSampler(make_sampler(profile, ks, device), profile.context_width, profile.spec_version)

    def value(level, field) -> int:
        if level.issued is not None:
            return rng.choice(level.issued)
        return rng.randrange(1 << field.bits)

    pay = torch.tensor([encode_payload(profile, {f.name: value(lv, f) for lv in profile.levels for f in lv.fields})
                        for _ in range(rows)])
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, V, dtype=torch.float64, generator=gen) * 3
    logits[:, rng.randrange(7)::7] = float("-inf")  # masked ids (top-k / top-p)
    logits[0, : V - 5] = float("-inf")  # a row whose whole mass sits at the top of the vocabulary
    ctx = torch.tensor([[rng.randrange(V) for _ in range(profile.context_width)] for _ in range(rows)])
    done = torch.full((rows,), profile.context_width + 5, dtype=torch.int64)
    return fs, logits, ctx, pay, done


def draw(spec: int, backend: str, dtype=torch.float64, device: str = "cpu") -> list[int]:
    fs, logits, ctx, pay, done = step_case(spec, device=device)
    tokens, marks = fs.step(logits.to(device, dtype), ctx.to(device), pay.to(device), done.to(device),
                            fs.new_log(len(ctx)), backend=backend, with_marks=True)
    assert bool(marks.all())
    return tokens.cpu().tolist()


@pytest.mark.skipif(not native_ok, reason="C kernel not built")
@pytest.mark.parametrize("spec", [2, 3, 4])
def test_c_and_torch_steps_draw_the_same_tokens_at_262144(spec):
    for dtype in (torch.float64, torch.float32):
        got = draw(spec, "native", dtype)
        assert got == draw(spec, "torch", dtype), (spec, dtype)
        assert all(0 <= t < V for t in got) and got[0] >= V - 5


def decode_case(seed: int = 0) -> dict:
    """A decode problem over V: a segmented level-1 table and a per-value level-2 table, windows, rows of
    ids spread over the whole vocabulary (repeats, an empty row)."""
    rng = random.Random(seed)
    keys = [bytes(rng.randrange(256) for _ in range(16)) for _ in range(300)]
    batch = [[rng.randrange(V) for _ in range(n)] for n in (60, 0, 25)]
    batch[0][40:] = batch[0][:20]  # repeated contexts
    batch.append([V - 1 - rng.randrange(8) for _ in range(30)])  # the top of the vocabulary
    return dict(sched=(80,), vocab=V, h=3, tables=[(1, keys[:4], False), (2, keys[4:260], True)], pos=keys[299],
                segments=4, batch=batch, windows=8)


def test_decode_evidence_kernels_agree_at_262144():
    """C bit-identical to the reference, torch within an ulp (as in tests/gpu/test_kernels.py)."""
    from tests.gpu import test_kernels as tk

    case = decode_case()
    if cpu_kernel.available():
        tk._assert_exact(case, *tk._run(case, cpu_kernel.segment_scores))
    tk._assert_close(case, *tk._run(case, torch_kernel.segment_scores))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_triton_step_and_decode_kernel_in_interpreter_at_262144():
    """The Triton step and decode kernel on the CPU through TRITON_INTERPRET=1 (own process: the flag is read
    at import): the same tokens as the torch step for spec v2-v4; the reference's decode scores within 1e-12
    (the per-value table's log is numpy's in the interpreter, libm's last bit apart: tests/gpu/test_kernels.py)."""
    code = ("import sys; sys.path.insert(0, '.')\n"
            "from tests.gpu import test_kernels as tk, test_large_vocab as t\n"
            "from gpu import triton_kernels\n"
            "for spec in (2, 3, 4):\n"
            "    assert t.draw(spec, 'triton') == t.draw(spec, 'torch'), spec\n"
            "case = t.decode_case()\n"
            "tk._assert_close(case, *tk._run(case, triton_kernels.segment_scores))\n"
            "print('ok')\n")
    assert_passes_interpreted(code, timeout=1200)



@pytest.mark.skipif(not (HAS_TRITON and torch.cuda.is_available()), reason="needs CUDA and triton")
def test_triton_on_cuda_at_262144():
    """On a GPU: the Triton and torch steps draw the CPU step's tokens, the Triton decode kernel is bit-identical."""
    from gpu import triton_kernels
    from tests.gpu import test_kernels as tk

    for spec in (2, 3, 4):
        want = draw(spec, "native" if native_ok else "torch")
        for backend in ("triton", "torch"):
            assert draw(spec, backend, device="cuda") == want, (spec, backend)
    case = decode_case()
    tk._assert_exact(case, *tk._run(case, triton_kernels.segment_scores, device="cuda"))
