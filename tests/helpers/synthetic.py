"""A synthetic 'language model' for fast statistical tests: random logits per step (no torch model), drawn by the
product's own generation step, so what a test measures is what `hero generate`, the SDK and serving engines draw.

Every token goes through gpu/step.py `FusedSampler.step` (built by verifier/engine/fused.py, as every generation
path builds it), whose mark rule is verifier/engine/reference.py `is_marked`: the first h tokens (spec v2+), a row
its gated opening still holds and a repeated continuation context are drawn fresh. Nothing here decides a mark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from gpu.opening import OpeningGate
from verifier.engine.fused import make_fused_sampler, new_opening
from verifier.engine.keys import KeySet
from verifier.engine.payload import encode_payload
from verifier.engine.profile import Profile


def generate(profile: Profile, keyset: KeySet, payloads: Sequence[Mapping[str, int]], steps: int, *,
             sigma: float = 2.0, seed: int = 0, watermark: bool = True, probs: list[Tensor] | None = None,
             opening_nats: float | None = None, top_k: int | None = None, backend: str | None = None) -> Tensor:
    """Continuation ids [B, steps] after a prompt of h random ids, from logits N(0, sigma^2) per step (optionally
    top-k warped), drawn by the product's step with its gated opening (`opening_nats`: default the product's
    `OPENING_NATS`, 0: only the first h tokens fresh). Every spec version (v5's level depends on the generator's
    index, which only the step tracks).

    watermark=False: the same distributions drawn unmarked by the same step, every row held in its opening
    (the step's own fresh draw; spec v2+, since spec v1 marks held rows too). `probs`: a list that receives, per
    step, the generator's own level probabilities of the chosen tokens [B, levels] (verifier.engine.model_aware's
    law: what a model-aware verifier with the generator's exact model would read). `backend`: the step's backend
    (default: the one the product picks for the device)."""
    g = torch.Generator().manual_seed(seed)
    h, v = profile.context_width, profile.vocab_size
    fs = make_fused_sampler(profile, keyset)
    pay = torch.tensor([encode_payload(profile, p) for p in payloads])
    b = len(payloads)
    ids = torch.randint(0, v, (b, h), generator=g)
    generated = torch.zeros(b, dtype=torch.int64)
    log = fs.new_log(b, capacity=steps + 1)
    opening = new_opening(profile, b, opening_nats) if watermark else _held_throughout(profile, b, steps)
    for _ in range(steps):
        logits = torch.randn(b, v, generator=g) * sigma
        if top_k:
            kth = logits.topk(top_k, dim=1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        tok = fs.step(logits, ids[:, -h:], pay, generated, log, g, backend=backend, opening=opening)
        if probs is not None:
            probs.append(_level_probs(profile, logits, tok))
        ids = torch.cat([ids, tok.unsqueeze(1)], dim=1)
    return ids[:, h:]


def _held_throughout(profile: Profile, rows: int, steps: int) -> OpeningGate:
    """An opening that never ends within `steps` tokens: the step draws every token fresh (spec v2+)."""
    if profile.spec_version < 2:
        raise ValueError("spec v1 marks every token its opening holds: no unmarked draw through the step")
    return OpeningGate.new(rows, math.inf, cap=steps + 1)


def _level_probs(profile: Profile, logits: Tensor, tok: Tensor) -> Tensor:
    from verifier.engine.model_aware import routing_prefixes

    pref = torch.from_numpy(routing_prefixes(profile))
    p = torch.softmax(logits.double(), dim=-1)
    prev = torch.ones(p.shape[0], dtype=torch.float64)
    out = []
    for lv in range(pref.shape[0] - 1):
        size = int(pref[lv].max()) + 1
        mass = torch.zeros(p.shape[0], size, dtype=torch.float64).scatter_add_(1, pref[lv].expand(p.shape[0], -1), p)
        cur = mass.gather(1, pref[lv, tok].unsqueeze(1))[:, 0]
        out.append(cur / prev)
        prev = cur
    out.append(p.gather(1, tok.unsqueeze(1))[:, 0] / prev)
    return torch.stack(out, dim=1)


def bit_errors(profile: Profile, level: int, decoded: dict, truth: dict) -> tuple[int, int]:
    """(correct bits, total bits) of one level's fields; undecoded fields count as wrong."""
    ok = tot = 0
    for f in profile.levels[level - 1].fields:
        v, t = decoded.get(f.name), truth[f.name]
        for i in range(f.bits):
            tot += 1
            ok += v is not None and ((v >> i) & 1) == ((t >> i) & 1)
    return ok, tot
