"""Watermarked generation through `transformers` (the provider side's adapter): a LogitsProcessor that samples
the token itself.

HF applies its own temperature/top-k/top-p warpers *after* user processors, so this processor takes
the warpers, applies them first, draws the token with the fused step (gpu/step.py `FusedSampler.step`, the one
step of every generation path) and returns a one-hot score row (0 at the chosen id, -inf elsewhere). Any later
warper leaves a one-hot row unchanged and HF's multinomial then returns exactly our token. Which tokens are
marked (repeated contexts, the first h tokens under spec v2, the gated opening of gpu/opening.py) is the step
backends' rule, written out in `verifier/engine/reference.py` `is_marked`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from gpu.opening import OpeningGate
from gpu.step import ContextLog, FusedSampler
from verifier.engine.fused import make_fused_sampler, new_generator, new_opening
from verifier.engine.keys import KeySet
from verifier.engine.payload import encode_payload
from verifier.engine.profile import Profile
from verifier.engine.warpers import make_warpers

__all__ = ["Generation", "HeroLogitsProcessor", "WatermarkProcessor", "encode_prompts", "generate_watermarked"]


class WatermarkProcessor(LogitsProcessor):
    """One `model.generate` call's watermark over the fused step: the rows' payloads, step counters and context
    log on the device; draws each token itself and returns a one-hot score row.

    input_ids [B, S] (left-padded prompts + generated tokens), scores [B, V] -> one-hot scores [B, V]. `warpers`
    (temperature / top-k / top-p) are applied first when transformers' own are off (`hero generate`); with
    `watermarking_config` transformers has applied its own already. One processor per `generate` call.
    """

    def __init__(self, sampler: FusedSampler, payload: torch.Tensor, generator: torch.Generator | None = None,
                 opening: OpeningGate | None = None, *, warpers: LogitsProcessorList | None = None,
                 vocab_size: int | None = None) -> None:
        self.sampler = sampler
        self.payload = payload
        self.device = payload.device
        self.generator = generator if generator is not None else new_generator(self.device)
        self.opening = opening
        self.warpers = warpers or LogitsProcessorList()
        self.vocab_size = vocab_size
        self.prompt_length: int | None = None
        self.log: ContextLog = sampler.new_log(payload.shape[0])

    def __repr__(self) -> str:  # never the key words
        return f"{type(self).__name__}(rows={self.payload.shape[0]})"

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, s = input_ids.shape
        if b != self.payload.shape[0]:
            raise ValueError(f"batch has {b} rows but {self.payload.shape[0]} payloads were given")
        if self.vocab_size is not None and scores.shape[-1] != self.vocab_size:
            raise ValueError(f"model vocabulary {scores.shape[-1]} != profile vocab_size {self.vocab_size}")
        if self.prompt_length is None:
            self.prompt_length = s
        step = s - self.prompt_length
        h = self.sampler.h
        warped = self.warpers(input_ids, scores) if self.warpers else scores
        context = input_ids[:, -h:].to(self.device)
        if s < h:  # a prompt shorter than the context: left-padded as context_tail does
            context = torch.nn.functional.pad(context, (h - s, 0), value=0)
        self.log.ensure(step + 1)
        generated = torch.full((b,), step, dtype=torch.int64, device=self.device)
        tokens = self.sampler.step(warped.to(self.device), context, self.payload, generated, self.log,
                                   self.generator, opening=self.opening)
        # In place (as transformers' own processors do): no fresh [B, V] allocation per step.
        return scores.fill_(float("-inf")).scatter_(1, tokens.to(scores.device).unsqueeze(1), 0.0)


class HeroLogitsProcessor(WatermarkProcessor):
    """Watermarks every row of a `model.generate(do_sample=True)` batch with its own payload (`hero generate`,
    the SDK's `logits_processor` and `generate`): HF applies its own temperature/top-k/top-p warpers *after* user
    processors, so this one takes the warpers and applies them first."""

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
        dev = torch.device(device)
        payload = torch.tensor([encode_payload(profile, p) for p in payloads], dtype=torch.int64, device=dev)
        super().__init__(make_fused_sampler(profile, keyset, dev), payload, generator,
                         new_opening(profile, len(payloads), opening_nats, dev), warpers=warpers,
                         vocab_size=profile.vocab_size)
        self.profile = profile


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


def encode_prompts(tokenizer, prompts: Sequence[str]):
    """Prompts as the model was trained to see them: led by the tokenizer's BOS where it adds one (Gemma, Llama:
    without it a base model writes junk) unless the text already starts with it (a chat template writes its own);
    nothing added for a tokenizer that adds no BOS (SmolLM2)."""
    bos = getattr(tokenizer, "bos_token", None)
    adds = bos is not None and tokenizer("", add_special_tokens=True)["input_ids"][:1] == [tokenizer.bos_token_id]
    texts = [p if not adds or p.startswith(bos) else bos + p for p in prompts]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


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
    enc = encode_prompts(tokenizer, prompts).to(device)
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
