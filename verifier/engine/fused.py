"""The fused step's builders, without `transformers`: what every generation path (transformers' processors in
`verifier/provider/generation.py`, the serving seam `verifier/provider/step.py`, the provider SDK) builds its draw
from. torch and the profile only, so a serving engine's process imports no model library of ours.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import torch

from gpu.opening import OPENING_NATS, OpeningGate
from gpu.sampler import HeroSampler
from gpu.step import FusedSampler
from verifier.engine.keys import KeySet
from verifier.engine.profile import Profile

__all__ = ["context_tail", "make_fused_sampler", "make_sampler", "new_generator", "new_opening"]


def make_sampler(profile: Profile, keyset: KeySet, device: str | torch.device = "cpu") -> HeroSampler:
    """The profile's key tables on `device` (every level's), what its fused step draws with
    (`make_fused_sampler`: the only way a generation path draws)."""
    if keyset.levels != profile.depth:
        raise ValueError(f"generation needs all {profile.depth} levels' keys, got {keyset.levels}")
    return HeroSampler(
        profile.schedule,
        profile.segments,
        [list(t.entries) for t in keyset.tables],
        keyset.position,
        torch.device(device),
        stride=profile.routing_stride,
        seed_keys=[t.level_key for t in keyset.tables],
        multiplexed=profile.multiplex is not None,
    )


def make_fused_sampler(profile: Profile, keyset: KeySet, device: str | torch.device = "cpu") -> FusedSampler:
    """The fused step (gpu/step.py) of the profile with every level's key table on `device`: the one sampling
    step of every generation path (`hero generate`, the SDK, `HeroWatermarkingConfig`, serving engines)."""
    mx = profile.multiplex
    return FusedSampler(make_sampler(profile, keyset, device), profile.context_width, profile.spec_version,
                        None if mx is None else (mx.front_tokens, mx.front_public, mx.public))


def new_opening(profile: Profile, rows: int, nats: float | None = None,
                device: str | torch.device = "cpu") -> OpeningGate | None:
    """The gated opening of `rows` responses (gpu/opening.py); None under spec v1 (every token marked)
    or with `nats` = 0. Default: `OPENING_NATS`."""
    nats = OPENING_NATS if nats is None else nats
    if profile.spec_version < 2 or nats <= 0:
        return None
    return OpeningGate.new(rows, nats, device=device)


def new_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded from the OS CSPRNG: the fresh randomness of unmarked tokens, unpredictable to anyone
    (a fixed default seed would make every response's opening a function of the prompt)."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(secrets.randbits(63))
    return g


def context_tail(prompt: Sequence[int], output: Sequence[int], h: int) -> list[int]:
    """The last h ids of prompt + output, left-padded with id 0 when there are fewer (a one-token prompt).
    Only contexts of tokens g < h touch the prompt or the padding; spec v2+ draws those with fresh randomness
    and a verifier never sees the prompt, so the padding never reaches a scored token."""
    tail = list(output[-h:]) if h else []
    if len(tail) < h:
        tail = list(prompt[max(0, len(prompt) - (h - len(tail))):]) + tail
    return [0] * (h - len(tail)) + tail
