"""Model-aware scoring: the LM re-run gives, per scored token and level, the probability the routing step had.

A verifier that holds the profile's language model re-runs it over the text alone (it never sees the
prompt), in batches on its device (CUDA when present), and reads, at every scored position t, the model's
next-token distribution P_t. A deployment that knows how its providers sample (`DeploymentSampling`: their
temperature, top-k, top-p) re-creates that warp with transformers' own warpers, mixed with the unwarped
distribution (the re-run never sees the prompt, so a chosen token may fall outside the re-run's nucleus);
otherwise P_t is the model's distribution at temperature 1. Under the HeRo sampler level l chose the
routing chunk holding x_t among its siblings, so that step's probability is
p_l = mass(x_t's level-l range) / mass(its level-(l-1) range); the last level's range is the token itself.
These p_l (a function of the text only) become the weights of the decoder's weighted statistic
(engine/weighted.py, engine/weighted_decode.py). The model object is handed in (the service binds
verifier.lm's loader in verifier/verify/scoring.py): the engine loads no model itself.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from verifier.engine import reference
from verifier.engine.decoder import DecodeError, Decoder, DecodeResult, token_ids
from verifier.engine.profile import Profile
from verifier.engine.weighted_decode import DEFAULT_STATISTIC, WeightedDecoder, Weighting

DEFAULT_BATCH = 16
DEFAULT_MIX = 0.25


@dataclass(frozen=True)
class DeploymentSampling:
    """How the deployment's providers sample, as the verifier re-creates it over the text alone.

    The routing step's probability is taken under the *warped* distribution the generator drew from: at
    top-p 0.9 a position whose nucleus holds one token carries no evidence (weight 0), and the tokens
    that do are weighed by the in-nucleus odds the generator had. `mix` of the unwarped distribution is
    kept (P = (1 - mix) warped + mix raw) because the re-run lacks the prompt: a chosen token outside the
    re-run's nucleus keeps a finite probability (and a clipped weight) instead of an undefined one.
    A setting of the deployment, never of a request: an auditor who could try several and keep the
    smallest p-value would no longer hold a calibrated one."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    mix: float = DEFAULT_MIX

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError("temperature must be > 0")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError("top_k must be >= 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.mix <= 1:
            raise ValueError("mix must be in [0, 1]")

    @property
    def warps(self) -> bool:
        return self.temperature != 1.0 or bool(self.top_k) or (self.top_p is not None and self.top_p < 1)

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        """[n, V] float64 logits -> [n, V] probabilities: the deployment's warp mixed with the raw model."""
        raw = torch.softmax(logits, dim=-1)
        if not self.warps:
            return raw
        from verifier.engine.warpers import make_warpers  # transformers' warpers: the generator's own

        warped = torch.softmax(make_warpers(self.temperature, self.top_k, self.top_p)(None, logits.clone()), dim=-1)
        return (1.0 - self.mix) * warped + self.mix * raw

    def describe(self) -> str:
        if not self.warps:
            return "temperature 1"
        parts = [f"temperature {self.temperature:g}"]
        parts += [f"top-k {self.top_k}"] if self.top_k else []
        parts += [f"top-p {self.top_p:g}"] if self.top_p is not None and self.top_p < 1 else []
        return ", ".join(parts) + f", mix {self.mix:g}"


@lru_cache(maxsize=8)
def _prefixes(vocab: int, schedule: tuple[int, ...], stride: int) -> np.ndarray:
    """[L, V] int64: for every token, an id of its routing range after levels 1..L-1, then the token itself."""
    rho = np.arange(vocab, dtype=np.int64)
    if stride:
        a, r = divmod(vocab, stride)
        c, q = rho % stride, rho // stride
        rho = c * a + np.minimum(c, r) + q
    out = []
    start = np.zeros(vocab, dtype=np.int64)
    size = np.full(vocab, vocab, dtype=np.int64)
    prefix = np.zeros(vocab, dtype=np.int64)
    for k in schedule:
        rel = rho - start
        a, r = size // k, size % k
        small = k - r
        chunk = np.where((a > 0) & (rel < small * a), rel // np.maximum(a, 1), small + (rel - small * a) // (a + 1))
        cstart = np.where(chunk < small, chunk * a, small * a + (chunk - small) * (a + 1))
        start, size = start + cstart, np.where(chunk < small, a, a + 1)
        prefix = prefix * k + chunk
        out.append(prefix.copy())
    out.append(np.arange(vocab, dtype=np.int64))
    return np.stack(out)


def routing_prefixes(profile: Profile) -> np.ndarray:
    """[levels, V]: which tokens share a routing range at each level (engine/reference.routing_path's law)."""
    return _prefixes(profile.vocab_size, tuple(profile.schedule), profile.routing_stride)


def scored_logits(model, batch: Sequence[Sequence[int]], context_width: int, *,
                  batch_size: int = DEFAULT_BATCH):
    """Per text (in order): (scored positions, [n_scored, V] float64 logits of P(x_t | x_<t), the text alone).

    One forward pass per `batch_size` texts on the model's device, no prompt, right-padded. Whole matrices: for
    benchmarks on texts of known size; the service scores through `level_probabilities` (chunked, bounded)."""
    for r, logits in text_logits(model, batch, batch_size=batch_size):
        pos = reference.scored_positions(r, context_width)
        t = torch.tensor(pos, dtype=torch.int64, device=logits.device)
        yield pos, logits[t - 1].double()


def text_logits(model, batch: Sequence[Sequence[int]], *, batch_size: int = DEFAULT_BATCH):
    """Per text (in order): (its ids, [len, V] logits of P(x_{t+1} | x_<=t)), the text alone: one forward pass
    per `batch_size` texts on the model's device, right-padded. Whole [len, V] matrices: benchmarks only (the
    service's path is `level_probabilities`, which never holds one)."""
    device = next(model.parameters()).device
    for lo in range(0, len(batch), batch_size):
        rows = [list(x) for x in batch[lo : lo + batch_size]]
        width = max(1, max(len(r) for r in rows))
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
            mask[i, : len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        for i, r in enumerate(rows):
            yield r, logits[i, : len(r)]


@lru_cache(maxsize=8)
def _device_prefixes(vocab: int, schedule: tuple[int, ...], stride: int, device: str) -> tuple[torch.Tensor, list[int]]:
    """routing_prefixes on `device` and each level's range count: made once, not per text."""
    pref = torch.from_numpy(_prefixes(vocab, schedule, stride)).to(device)
    return pref, [int(pref[lv].max()) + 1 for lv in range(pref.shape[0])]


def routing_probabilities(profile: Profile, probs: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
    """[n, V] next-token probabilities and the [n] chosen tokens -> [n, levels] float64 p_l: the chosen
    routing range's share of its parent's mass at each level (the last level: the token's share). Spec v5 routes
    nothing: every level draws whole tokens at its own positions, so each level's p is the token's probability."""
    n, device = tokens.shape[0], probs.device
    if profile.multiplex is not None:
        p = probs.gather(1, tokens.unsqueeze(1)) if n else probs.new_zeros(0, 1)
        return p.expand(-1, profile.depth).clamp(1e-12, 1.0).cpu().numpy()
    pref, sizes = _device_prefixes(profile.vocab_size, tuple(profile.schedule), profile.routing_stride, str(device))
    if n == 0:
        return np.zeros((0, pref.shape[0]))
    prev = torch.ones(n, dtype=torch.float64, device=device)
    levels = []
    for lv in range(pref.shape[0] - 1):
        idx = pref[lv].expand(n, -1)
        mass = torch.zeros(n, sizes[lv], dtype=torch.float64, device=device).scatter_add_(1, idx, probs)
        cur = mass.gather(1, pref[lv, tokens].unsqueeze(1))[:, 0]
        levels.append(cur / prev.clamp_min(1e-300))
        prev = cur
    levels.append(probs.gather(1, tokens.unsqueeze(1))[:, 0] / prev.clamp_min(1e-300))
    return torch.stack(levels, dim=1).clamp(1e-12, 1.0).cpu().numpy()


DEFAULT_CHUNK = 64  # positions whose [chunk, V] logits exist at once (SmolLM2, CPU: +171 MB peak at 64, +309 at 256)
DEFAULT_BATCH_TOKENS = 4096  # padded tokens per forward pass: bounds the activations, whatever the request


def forward_groups(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Text indices per forward pass, in order: at most `batch_size` texts and `batch_tokens` padded tokens (a
    text longer than `batch_tokens` goes alone)."""
    groups: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i, n in enumerate(lengths):
        w = max(width, n, 1)
        if cur and (len(cur) >= batch_size or w * (len(cur) + 1) > batch_tokens):
            groups.append(cur)
            cur, w = [], max(n, 1)
        cur.append(i)
        width = w
    if cur:
        groups.append(cur)
    return groups


def _layers(model) -> list:
    """The decoder layers of a transformers causal LM (where a deadline is checked during a forward pass)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    return list(layers) if layers is not None else []


@contextmanager
def _checked(model, deadline):
    """`deadline.check()` before every decoder layer while in the block: a long forward pass stops within one layer."""
    handles = [] if deadline is None else [m.register_forward_pre_hook(lambda *_: deadline.check())
                                           for m in _layers(model)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _hidden_and_head(model, ids: torch.Tensor, mask: torch.Tensor):
    """([B, W, H] last hidden states, head: [n, H] -> [n, V] logits) for a transformers causal LM; models without
    a decoder/head split (test stand-ins) give ([B, W, V] logits, identity)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if head is None or decoder is None:
        return model(input_ids=ids, attention_mask=mask).logits, (lambda h: h)
    # With the mask: measured on SmolLM2 (CPU, one 2,048-token text), the pass peaks at +140 MB with it and +632 MB
    # without it (transformers then builds its own causal mask on another attention path).
    hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if not cap:
        return hidden, head

    def capped(h: torch.Tensor) -> torch.Tensor:  # as the model's own forward does after its head
        return torch.tanh(head(h) / cap) * cap

    return hidden, capped


def level_probabilities(model, profile: Profile, batch: Sequence[Sequence[int]], *,
                        batch_size: int = DEFAULT_BATCH,
                        sampling: DeploymentSampling | None = None, deadline=None,
                        batch_tokens: int = DEFAULT_BATCH_TOKENS, chunk: int = DEFAULT_CHUNK) -> list[np.ndarray]:
    """Per text, [n_scored, levels] float64: p_l of each scored token (reference.scored_positions order),
    each position's distribution `sampling`'s (default: the model at temperature 1).

    Bounded by construction: forward passes of at most `batch_tokens` padded tokens (`forward_groups`), and the
    LM head applied to `chunk` scored positions at a time, reduced to their p_l at once: no [len, V] matrix is
    ever held (a 20,000-token text's would be 3.9 GB in float32, twice that as float64). `deadline`
    (verifier.base.cancel.Deadline) is checked before every layer and every chunk."""
    sampling = sampling or DeploymentSampling()
    device = next(model.parameters()).device
    out: list[np.ndarray | None] = [None] * len(batch)
    for group in forward_groups([len(x) for x in batch], batch_size, batch_tokens):
        if deadline is not None:
            deadline.check()
        rows = [list(batch[i]) for i in group]
        width = max(1, max(len(r) for r in rows))
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.int64)
        for j, r in enumerate(rows):
            ids[j, : len(r)] = torch.tensor(r, dtype=torch.int64)
            mask[j, : len(r)] = 1
        with torch.no_grad(), _checked(model, deadline):
            hidden, head = _hidden_and_head(model, ids.to(device), mask.to(device))
            for j, (i, r) in enumerate(zip(group, rows, strict=True)):
                pos = reference.scored_positions(r, profile.context_width)
                parts = []
                for lo in range(0, len(pos), chunk):
                    if deadline is not None:
                        deadline.check()
                    at = pos[lo : lo + chunk]
                    t = torch.tensor(at, dtype=torch.int64, device=hidden.device)
                    logits = head(hidden[j, t - 1]).double()  # [c, V]: this chunk's only
                    tokens = torch.tensor([r[p] for p in at], dtype=torch.int64, device=hidden.device)
                    parts.append(routing_probabilities(profile, sampling.distribution(logits), tokens))
                    del logits
                out[i] = np.concatenate(parts) if parts else np.zeros((0, len(profile.schedule) + 1))
        del hidden
    return out  # type: ignore[return-value]


class TooManyTokens(DecodeError):
    """A text (or a request) is longer, in the LM's tokens, than model-aware scoring reads: 413 naming the cap."""


class ModelAwareScorer:
    """Model-aware decoding (`scoring: "model-aware"`, `hero decode --model-aware`, HERO_MODEL_AWARE=1): the
    profile's LM re-run over each text on `device`, its level probabilities turned into per-token weights
    (`Weighting`), the decoder's keys and rules applied to the weighted statistic.

    Its cost is bounded: at most `max_tokens` LM tokens per text (never more than the model's context), forward
    passes of at most `batch_tokens` padded tokens, logits reduced `chunk` positions at a time, and a wall-clock
    `deadline_s` per decode (plus the caller's cancellation: `bound`)."""

    def __init__(self, loader: Callable[[str, str, str | None], Any], device: str = "cpu",
                 weighting: Weighting | None = None,
                 batch_size: int = DEFAULT_BATCH, sampling: DeploymentSampling | None = None, *,
                 max_tokens: int = 2048, batch_tokens: int = DEFAULT_BATCH_TOKENS, chunk: int = DEFAULT_CHUNK,
                 deadline_s: float | None = None, deadline=None) -> None:
        # (model name, device, revision pin) -> the model (verifier/verify/scoring.py binds verifier.lm's)
        self._load = loader
        self.device = device
        self.weighting = weighting or Weighting(DEFAULT_STATISTIC)
        self.batch_size = batch_size
        self.sampling = sampling or DeploymentSampling()
        self.max_tokens = max_tokens
        self.batch_tokens = batch_tokens
        self.chunk = chunk
        self.deadline_s = deadline_s
        self.deadline = deadline  # one decode's (verifier.base.cancel.Deadline), set by `bound`

    def __repr__(self) -> str:
        return f"ModelAwareScorer(device={self.device!r}, {self.weighting}, {self.sampling})"

    def bound(self, deadline) -> ModelAwareScorer:
        """This scorer for one decode under `deadline` (checked before every layer and chunk)."""
        view = copy.copy(self)
        view.deadline = deadline
        return view

    def check_lengths(self, batch: Sequence[Sequence[int]]) -> None:
        for i, x in enumerate(batch):
            if len(x) > self.max_tokens:
                raise TooManyTokens(f"text {i} is {len(x)} tokens long; model-aware scoring reads at most "
                                    f"{self.max_tokens} tokens per text (HERO_MODEL_AWARE_MAX_TOKENS)")

    def decode_ids(self, decoder: Decoder, batch: Sequence[Sequence[int]]) -> list[DecodeResult]:
        decoder.pad(batch)  # ids checked against the vocabulary before the model sees them
        if any(len(x) == 0 for x in batch):
            raise DecodeError("a text has no tokens")
        self.check_lengths(batch)
        # the profile's model at the revision its tokenizer is pinned to: another revision's weights would give
        # other probabilities (and may not even share the vocabulary)
        model = self._load(decoder.profile.tokenizer, self.device, decoder.profile.tokenizer_revision)
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if context and max(len(x) for x in batch) > context:  # a cap set past the model's context
            raise TooManyTokens(f"a text is longer than the model's context ({context} tokens)")
        probs = level_probabilities(model, decoder.profile, batch, batch_size=self.batch_size,
                                    sampling=self.sampling, deadline=self.deadline, batch_tokens=self.batch_tokens,
                                    chunk=self.chunk)
        h = decoder.profile.context_width
        weights = [self.weighting.for_text(p, x, h) for p, x in zip(probs, batch, strict=True)]
        return WeightedDecoder(decoder, statistic=self.weighting.statistic).decode_ids(batch, weights)

    def decode_texts(self, decoder: Decoder, texts: Sequence[str], tokenizer) -> list[DecodeResult]:
        """`Decoder.decode_texts`, model-aware."""
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise DecodeError(f"text {i} is empty")
        return self.decode_ids(decoder, token_ids(tokenizer, texts))
