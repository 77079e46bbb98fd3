"""A synthetic 'language model' for fast statistical tests: random logits per step (no torch model)."""

from __future__ import annotations

import torch

from gpu.sampler import HeroSampler
from verifier.engine.payload import encode_payload


def generate(profile, keyset, payloads, steps: int, *, sigma: float = 2.0, seed: int = 0, context_masking=True,
             watermark: bool = True, probs: list | None = None):
    """Returns continuation ids [B, steps] generated with the HeRo sampler (prompt of h random ids).

    As in engine/generation.py: repeated contexts and (spec v2) the first h tokens are drawn unmarked;
    watermark=False draws every token from the same distributions without the watermark. `probs`: a list
    that receives, per step, the generator's own level probabilities of the chosen tokens [B, levels]
    (verifier.engine.model_aware' law: what a model-aware verifier with the generator's exact model would read)."""
    g = torch.Generator().manual_seed(seed)
    h, v = profile.context_width, profile.vocab_size
    sampler = HeroSampler(
        profile.schedule,
        profile.segments,
        [list(t.entries) for t in keyset.tables],
        keyset.position,
        stride=profile.routing_stride,
        seed_keys=[t.level_key for t in keyset.tables],
    )
    pay = torch.tensor([encode_payload(profile, p) for p in payloads])
    b = len(payloads)
    ids = torch.randint(0, v, (b, h), generator=g)
    seen = [set() for _ in range(b)]
    for t in range(steps):
        logits = torch.randn(b, v, generator=g) * sigma
        ctx = ids[:, -h:]
        mark = torch.full((b,), watermark, dtype=torch.bool)
        if t < h and profile.spec_version >= 2:
            mark[:] = False
        elif context_masking and t >= h:
            for i, row in enumerate(ctx.tolist()):
                if tuple(row) in seen[i]:
                    mark[i] = False
                seen[i].add(tuple(row))
        tok = sampler.sample(logits, ctx, pay, mark, g)
        if probs is not None:
            probs.append(_level_probs(profile, logits, tok))
        ids = torch.cat([ids, tok.unsqueeze(1)], dim=1)
    return ids[:, h:]


def _level_probs(profile, logits, tok):
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


def bit_errors(profile, level: int, decoded: dict, truth: dict) -> tuple[int, int]:
    """(correct bits, total bits) of one level's fields; undecoded fields count as wrong."""
    ok = tot = 0
    for f in profile.levels[level - 1].fields:
        v, t = decoded.get(f.name), truth[f.name]
        for i in range(f.bits):
            tot += 1
            ok += v is not None and ((v >> i) & 1) == ((t >> i) & 1)
    return ok, tot


def generate_fused(profile, keyset, payloads, steps: int, *, sigma: float = 2.0, seed: int = 0,
                   backend: str | None = None, opening_nats: float = 0.0, top_k: int | None = None):
    """Continuation ids [B, steps] drawn by the product's one generation step (gpu/step.py `FusedSampler`, via
    verifier.engine.generation), from random logits (optionally top-k warped): every spec version, spec v5
    included (its level depends on the generator's index, which only the fused step tracks)."""
    from verifier.engine.generation import make_fused_sampler, new_opening

    g = torch.Generator().manual_seed(seed)
    h, v = profile.context_width, profile.vocab_size
    fs = make_fused_sampler(profile, keyset)
    pay = torch.tensor([encode_payload(profile, p) for p in payloads])
    b = len(payloads)
    ids = torch.randint(0, v, (b, h), generator=g)
    gen = torch.zeros(b, dtype=torch.int64)
    log = fs.new_log(b, capacity=steps + 1)
    opening = new_opening(profile, b, opening_nats) if opening_nats else None
    for _ in range(steps):
        logits = torch.randn(b, v, generator=g) * sigma
        if top_k:
            kth = logits.topk(top_k, dim=1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        tok = fs.step(logits, ids[:, -h:], pay, gen, log, g, backend=backend, opening=opening)
        ids = torch.cat([ids, tok.unsqueeze(1)], dim=1)
    return ids[:, h:]
