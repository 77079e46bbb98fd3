"""Watermarked generation through `transformers`: a LogitsProcessor that samples the token itself.

HF applies its own temperature/top-k/top-p warpers *after* user processors, so this processor takes
the warpers, applies them first, draws the token with the HeRo sampler and returns a one-hot score
row (0 at the chosen id, -inf elsewhere). Any later warper leaves a one-hot row unchanged and HF's
multinomial then returns exactly our token. Repeated h-gram contexts (inside the continuation) are
sampled without watermark from the same warped distribution, as the decoder skips them. Under spec v2
the first h generated tokens (whose contexts touch the prompt, which a verifier never sees) are also
drawn with fresh randomness, and after them every token until the opening's surprisal reaches
`OPENING_NATS` (gpu/opening.py; at most `OPENING_CAP` tokens): one key and prompt then no longer fix the
opening of every response.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from gpu.opening import OPENING_NATS, OpeningGate
from gpu.sampler import HeroSampler
from verifier.engine.keys import KeySet
from verifier.engine.payload import encode_payload
from verifier.engine.profile import Profile


def make_warpers(temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> LogitsProcessorList:
    warpers = LogitsProcessorList()
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (watermarking needs sampling)")
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def make_sampler(profile: Profile, keyset: KeySet, device: str | torch.device = "cpu") -> HeroSampler:
    """The profile's sampler with every level's key table on `device`."""
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
    )


def watermark_marks(
    profile: Profile, contexts: torch.Tensor, generated: Sequence[int], seen: Sequence[set[tuple[int, ...]]]
) -> torch.Tensor:
    """Which rows draw a watermarked token now ([B] bool on the CPU); records new continuation contexts.

    Row i has generated `generated[i]` tokens so far; its context (last h ids) lies inside the
    continuation once generated >= h. A context already in `seen[i]` is drawn without watermark (the
    decoder skips repeats). Under spec v2 the first h tokens (contexts touching the prompt, which a
    verifier never sees) are drawn with fresh randomness too; spec v1 marks them.
    """
    h = profile.context_width
    mark = torch.ones(contexts.shape[0], dtype=torch.bool)
    rows = None
    for i, g in enumerate(generated):
        if g < h:
            mark[i] = profile.spec_version < 2
            continue
        if rows is None:
            rows = contexts.tolist()
        key = tuple(rows[i])
        if key in seen[i]:
            mark[i] = False
        else:
            seen[i].add(key)
    return mark


def new_opening(profile: Profile, rows: int, nats: float | None = None,
                device: str | torch.device = "cpu") -> OpeningGate | None:
    """The gated opening of `rows` responses (gpu/opening.py); None under spec v1 (every token marked)
    or with `nats` = 0. Default: `OPENING_NATS`."""
    nats = OPENING_NATS if nats is None else nats
    if profile.spec_version < 2 or nats <= 0:
        return None
    return OpeningGate.new(rows, nats, device=device)


def watermark_step(
    sampler: HeroSampler,
    profile: Profile,
    logits: torch.Tensor,
    contexts: torch.Tensor,
    payload: torch.Tensor,
    generated: Sequence[int],
    seen: Sequence[set[tuple[int, ...]]],
    generator: torch.Generator | None = None,
    opening: OpeningGate | None = None,
) -> torch.Tensor:
    """One sampling step for a batch: the token ids [B] (int64, on the sampler's device).

    logits [B, V]: the warped scores (temperature/top-k/top-p already applied); contexts [B, h] int64:
    each row's last h token ids; payload [B, K, L] int64 (`encode_payload` per row); generated / seen:
    per-row state (see `watermark_marks`); `opening`: the rows' gated openings (row i = slot i).
    The one implementation of the step: `HeroLogitsProcessor` and the provider SDK both call it.
    """
    if opening is None:
        mark = watermark_marks(profile, contexts, generated, seen)
        return sampler.sample(logits, contexts, payload, mark.to(logits.device), generator)
    dev = opening.need.device
    rows = torch.arange(len(generated), device=dev)
    held = opening.held(torch.tensor(list(generated), dtype=torch.int64, device=dev), rows)
    shown = [0 if g else n for g, n in zip(held.tolist(), generated, strict=True)]
    mark = watermark_marks(profile, contexts, shown, seen)
    tokens = sampler.sample(logits, contexts, payload, mark.to(logits.device), generator)
    opening.account(logits, tokens, held.to(logits.device), rows.to(logits.device))
    return tokens


class HeroLogitsProcessor(LogitsProcessor):
    """Watermarks every row of a `model.generate(do_sample=True)` batch with its own payload.

    input_ids [B, S] (left-padded prompts + generated tokens), scores [B, V] -> one-hot scores [B, V].
    Create one processor per `generate` call: it remembers the prompt length and seen contexts.
    """

    def __init__(
        self,
        profile: Profile,
        keyset: KeySet,
        payloads: Sequence[Mapping[str, int]],
        warpers: LogitsProcessorList | None = None,
        device: str | torch.device = "cpu",
        generator: torch.Generator | None = None,
        opening_nats: float | None = None,
    ) -> None:
        if keyset.levels != profile.depth:
            raise ValueError(f"generation needs all {profile.depth} levels' keys, got {keyset.levels}")
        self.profile = profile
        self.device = torch.device(device)
        self.sampler = make_sampler(profile, keyset, self.device)
        self.payload = torch.tensor(
            [encode_payload(profile, p) for p in payloads], dtype=torch.int64, device=self.device
        )
        self.warpers = warpers or LogitsProcessorList()
        if generator is None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(secrets.randbits(63))
        self.generator = generator
        self.prompt_length: int | None = None
        self.seen: list[set[tuple[int, ...]]] = [set() for _ in payloads]
        self.opening = new_opening(profile, len(payloads), opening_nats, self.device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, s = input_ids.shape
        if b != self.payload.shape[0]:
            raise ValueError(f"batch has {b} rows but {self.payload.shape[0]} payloads were given")
        if scores.shape[-1] != self.profile.vocab_size:
            raise ValueError(f"model vocabulary {scores.shape[-1]} != profile vocab_size {self.profile.vocab_size}")
        if self.prompt_length is None:
            self.prompt_length = s
        h = self.profile.context_width
        warped = self.warpers(input_ids, scores)
        context = input_ids[:, -h:].to(self.device)
        if s < h:  # a prompt shorter than the context: left-padded as context_tail does
            context = torch.nn.functional.pad(context, (h - s, 0), value=0)
        tokens = watermark_step(
            self.sampler, self.profile, warped.to(self.device), context, self.payload,
            [s - self.prompt_length] * b, self.seen, self.generator, self.opening,
        )
        # In place (as HF's own processors do): no fresh [B, V] allocation per step.
        return scores.fill_(float("-inf")).scatter_(1, tokens.to(scores.device).unsqueeze(1), 0.0)


def context_tail(prompt, output, h: int) -> list[int]:
    """The last h ids of prompt + output, left-padded with id 0 when there are fewer (a one-token prompt).
    Only contexts of tokens g < h touch the prompt or the padding; spec v2+ draws those with fresh randomness
    and a verifier never sees the prompt, so the padding never reaches a scored token."""
    tail = list(output[-h:])
    if len(tail) < h:
        tail = list(prompt[max(0, len(prompt) - (h - len(tail))):]) + tail
    return [0] * (h - len(tail)) + tail


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    prompt: str


class _StepHook(LogitsProcessor):
    """Calls back once per step and leaves the scores as they are."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.fn()
        return scores


def generate_watermarked(
    model,
    tokenizer,
    prompts: Sequence[str],
    payloads: Sequence[Mapping[str, int]],
    profile: Profile,
    keyset: KeySet,
    *,
    max_new_tokens: int = 200,
    min_new_tokens: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    watermark: bool = True,
    generator: torch.Generator | None = None,
    on_step: Callable[[], None] | None = None,
    opening_nats: float | None = None,
) -> list[Generation]:
    """Batched generation; returns the continuation only (what a verifier later receives). `on_step` is
    called once per generated token position (progress display); `opening_nats`: the gated
    opening's threshold (default `OPENING_NATS`; 0: only the first h tokens are fresh, as before)."""
    device = next(model.parameters()).device
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    warpers = make_warpers(temperature, top_k, top_p)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=tokenizer.pad_token_id,
    )
    if watermark:
        proc = HeroLogitsProcessor(profile, keyset, payloads, warpers, device=device, generator=generator,
                                   opening_nats=opening_nats)
        kwargs["logits_processor"] = LogitsProcessorList([proc])
    else:
        kwargs["logits_processor"] = warpers
    if on_step is not None:
        kwargs["logits_processor"] = LogitsProcessorList([*kwargs["logits_processor"], _StepHook(on_step)])
    with torch.no_grad():
        out = model.generate(**enc, **kwargs)
    prompt_len = enc["input_ids"].shape[1]
    results = []
    for i, p in enumerate(prompts):
        ids = out[i, prompt_len:].tolist()
        ids = [t for t in ids if t != tokenizer.pad_token_id or t == tokenizer.eos_token_id]
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id)]
        results.append(Generation(tokenizer.decode(ids, skip_special_tokens=True), ids, p))
    return results
