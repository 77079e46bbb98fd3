"""Generating from an opened bundle: a `transformers` helper and the engine-neutral sampler step.

Everything here delegates to `verifier.engine.generation` (the code `hero generate` runs) and its one step,
`gpu/step.FusedSampler.step`: the provider SDK adds only bookkeeping around it, never its own sampling math.

`BundleSampler.step` is the simplest integration point (each request's state in a `RequestState`); serving
engines with continuous batching keep state in slots on the device instead: `verifier/provider/step.py`.

    logits    [B, V] float tensor (any float dtype; the sampler computes in float32), the model's scores
              after your temperature / top-k / top-p (the watermark keeps that distribution exactly);
              V must equal the profile's vocab_size.
    contexts  [B, h] int64: the last h = profile.context_width token ids of each row (prompt included).
    payloads  [B, K, L] int64 from `BundleSampler.payload(fields)`, one per request (cache it per request).
    states    one `RequestState` per row, kept with the request for its whole life (rows may be at different
              steps; pass each request's own state every step).
    returns   [B] int64 token ids on the sampler's device; force them (e.g. one-hot the logits row).

The sampler's tensors live on the device given at construction; pass logits on the same device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from gpu.step import ContextLog
from verifier.engine.fused import make_fused_sampler, new_generator, new_opening
from verifier.engine.payload import encode_payload
from verifier.engine.warpers import make_warpers
from verifier.lm import load_model
from verifier.provider.bundle import GenerationBundle
from verifier.provider.chat import chat_prompt
from verifier.provider.generation import Generation, HeroLogitsProcessor, generate_watermarked

__all__ = ["BundleSampler", "ProviderGeneration", "RequestState", "generate", "load_model", "logits_processor",
           "new_generator"]  # new_generator: verifier.engine.generation's, the one seeding of fresh randomness


@dataclass
class RequestState:
    """Per-request state of the watermark: tokens drawn so far, the nats its gated opening still needs (None: the
    full threshold for a new request; a state made mid-response, generated > 0, is a resumed request whose opening
    was drawn before: open) and the log of continuation contexts already marked (the fused step's, one row)."""

    generated: int = 0
    opening_need: float | None = None
    log: ContextLog | None = field(default=None, repr=False)

    @property
    def contexts(self) -> int:
        """How many continuation contexts this request has marked (a repeat of one is drawn fresh)."""
        return 0 if self.log is None else int(self.log.counts[0])


class BundleSampler:
    """The watermark sampler of one opened bundle on one device (build once per bundle, share across requests)."""

    def __init__(self, bundle: GenerationBundle, device: str | torch.device = "cpu",
                 opening_nats: float | None = None) -> None:
        """`opening_nats`: the gated opening's threshold (default `OPENING_NATS`; 0: off)."""
        self.bundle = bundle
        self.profile = bundle.profile
        self.device = torch.device(device)
        self._sampler = make_fused_sampler(bundle.profile, bundle.keyset, self.device)
        self._opening_nats = opening_nats

    def __repr__(self) -> str:
        return f"BundleSampler({self.bundle!r}, device={self.device})"

    @property
    def key_versions(self) -> dict[int, str]:
        return dict(self.bundle.key_versions)

    @property
    def context_width(self) -> int:
        return self.profile.context_width

    def payload(self, fields: Mapping[str, int]) -> torch.Tensor:
        """[K, L] int64 payload of one request; fields by name, validated against the profile (PayloadError)."""
        return torch.tensor(encode_payload(self.profile, fields), dtype=torch.int64, device=self.device)

    def step(
        self,
        logits: torch.Tensor,
        contexts: torch.Tensor,
        payloads: torch.Tensor,
        states: Sequence[RequestState],
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """One watermarked token per row (see the module docstring for shapes); advances each state.
        BundleExpired once the bundle has expired."""
        self.bundle.require_fresh()
        b, v = logits.shape
        if v != self.profile.vocab_size:
            raise ValueError(f"logits have {v} columns but the profile's vocab_size is {self.profile.vocab_size}")
        if contexts.shape != (b, self.profile.context_width) or payloads.shape[0] != b or len(states) != b:
            raise ValueError("contexts [B, h], payloads [B, K, L] and states must match the logits' B rows")
        opening = new_opening(self.profile, b, self._opening_nats, self.device)
        if opening is not None:
            need = [st.opening_need if st.opening_need is not None else opening.nats if st.generated == 0 else 0.0
                    for st in states]
            opening.need = torch.tensor(need, dtype=torch.float32, device=self.device)
        log = self._batch_log(states)
        generated = torch.tensor([st.generated for st in states], dtype=torch.int64, device=self.device)
        tokens = self._sampler.step(logits.to(self.device), contexts.to(self.device, torch.int64),
                                    payloads.to(self.device), generated, log, generator, opening=opening)
        needs = opening.need.tolist() if opening is not None else [None] * b
        for i, (st, need) in enumerate(zip(states, needs, strict=True)):
            st.generated += 1
            st.opening_need = need
            st.log = ContextLog(log.words[i: i + 1], log.counts[i: i + 1])
        return tokens

    def _batch_log(self, states: Sequence[RequestState]) -> ContextLog:
        """The rows' context logs side by side (room for one more context each: the step may append one)."""
        log = self._sampler.new_log(len(states))
        log.ensure(max([max(st.generated for st in states) + 1,
                        *(st.log.capacity for st in states if st.log is not None)]))
        for i, st in enumerate(states):
            if st.log is not None:
                log.words[i, : st.log.capacity] = st.log.words[0]
                log.counts[i] = st.log.counts[0]
        return log


def logits_processor(
    bundle: GenerationBundle,
    payloads: Sequence[Mapping[str, int]],
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> HeroLogitsProcessor:
    """A `LogitsProcessor` for `model.generate(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, ...)`,
    one payload per batch row; it applies the given warpers itself. One processor per `generate` call."""
    bundle.require_fresh()
    return HeroLogitsProcessor(bundle.profile, bundle.keyset, payloads, make_warpers(temperature, top_k, top_p),
                               device=device, generator=generator)


@dataclass
class ProviderGeneration:
    """A watermarked continuation and the key versions (and bundle) it was made with."""

    text: str
    token_ids: list[int]
    prompt: str
    payload: dict[str, int]
    key_versions: dict[int, str]
    bundle_id: str


def generate(
    model,
    tokenizer,
    bundle: GenerationBundle,
    prompts: Sequence[str] | Sequence[Sequence[Mapping[str, str]]],
    payloads: Sequence[Mapping[str, int]],
    *,
    max_new_tokens: int = 200,
    min_new_tokens: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    on_step: Callable[[], None] | None = None,
    chat: bool = False,
) -> list[ProviderGeneration]:
    """Batched watermarked generation with `transformers` (what `hero generate` does, keys from the bundle).
    `chat`: each prompt is a user message (or a list of `{"role", "content"}` messages) under the model's chat
    template (`hero generate --chat`); the returned `prompt` is then the templated text the model saw."""
    if len(prompts) != len(payloads):
        raise ValueError("one payload per prompt")
    if chat:
        prompts = [chat_prompt(tokenizer, p) for p in prompts]
    for p in payloads:
        encode_payload(bundle.profile, p)  # validate before generating
    bundle.require_fresh()
    gens: list[Generation] = generate_watermarked(
        model, tokenizer, prompts, payloads, bundle.profile, bundle.keyset, max_new_tokens=max_new_tokens,
        min_new_tokens=min_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
        on_step=on_step,
    )
    return [
        ProviderGeneration(g.text, g.token_ids, g.prompt, dict(p), dict(bundle.key_versions), bundle.bundle_id)
        for g, p in zip(gens, payloads, strict=True)
    ]
