"""vLLM plugin: HeRo watermark per request, registered on vLLM's logits-processor entry point.

    pip install hero-verifier            # registers `vllm.logits_processors: hero = verifier.provider.vllm:...`
    HERO_VLLM_BUNDLE=/run/hero/bundle HERO_VLLM_PRIVATE_KEY=/run/hero/x25519.key vllm serve ...
    SamplingParams(..., extra_args={"hero": {"model": 37, "user": 1234}})

Configuration (environment, read by the frontend and the engine processes alike; only paths, never keys):
  HERO_VLLM_BUNDLE        file with the sealed bundle (base64 or raw), as `POST /v1/keys/generation-bundle` gives it
  HERO_VLLM_PRIVATE_KEY   file with the provider's raw 32-byte X25519 private key
  HERO_VLLM_URL           optional: the verifier service; then a `BundleSource` keeps the bundle current (token
                          from the file HERO_VLLM_TOKEN_FILE, poll every HERO_VLLM_REFRESH_S, default 60 s) and
                          the file bundle is only the starting point (it may be absent)
  HERO_VLLM_ENFORCE=1     refuse (at admission, HTTP 400) every request without a payload
Without a bundle configured the plugin is inert: requests without a payload pass untouched, a request with one
is refused. A payload is validated against the bundle's profile at admission (`validate_params`).

The plugin samples the token itself and hands vLLM a one-hot row. vLLM runs custom processors before
temperature / min-p / top-k / top-p (both runners), so the plugin applies the request's own temperature, min_p,
top_k and top_p first (vLLM's order) and draws from that distribution; vLLM's later warpers leave a one-hot row
unchanged. Requests keep the key tables they started with across a bundle rotation. Greedy requests (temperature
0) cannot carry a watermark (refused); speculative decoding is refused (draft tokens are not watermarked draws).

Two runners, two implementations, one registered class (`HeroLogitsProcessor`): vLLM's MRV2 loader accepts only
subclasses of its V2 base class, the legacy loader only calls the constructor, so the registered class is the
MRV2 implementation and its constructor hands the legacy argument shape `(vllm_config, device, is_pin_memory)`
to `HeroV1LogitsProcessor`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

try:  # Model Runner V2 (vLLM >= 0.32)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - older vLLM: the legacy runner only
    V2LogitsProcessor = V1LogitsProcessor  # type: ignore[misc,assignment]

from gpu import prf
from gpu.opening import OpeningGate
from gpu.step import ContextLog, FusedSampler
from verifier.engine.generation import context_tail, new_opening
from verifier.engine.payload import encode_payload
from verifier.provider.bundle import GenerationBundle, open_bundle

log = logging.getLogger("hero.provider.vllm")

EXTRA_KEY = "hero"
ENV_BUNDLE, ENV_KEY, ENV_URL, ENV_TOKEN, ENV_REFRESH, ENV_ENFORCE = (
    "HERO_VLLM_BUNDLE", "HERO_VLLM_PRIVATE_KEY", "HERO_VLLM_URL", "HERO_VLLM_TOKEN_FILE", "HERO_VLLM_REFRESH_S",
    "HERO_VLLM_ENFORCE")
_EPS = 1e-5  # vLLM's greedy threshold on temperature


def enforced() -> bool:
    return os.environ.get(ENV_ENFORCE, "0").lower() in ("1", "true", "yes")


# --- key material ---------------------------------------------------------------------------------------


class _Keys:
    """This process's current bundle: the sealed file, opened once, or a BundleSource kept current."""

    def __init__(self) -> None:
        self._source = None
        self._bundle: GenerationBundle | None = None
        self._lock = threading.Lock()
        key_file = os.environ.get(ENV_KEY)
        if not key_file:
            return
        private_key = Path(key_file).read_bytes()
        bundle_file = os.environ.get(ENV_BUNDLE)
        if bundle_file and Path(bundle_file).is_file():
            self._bundle = open_bundle(Path(bundle_file).read_bytes().strip(), private_key)
        url = os.environ.get(ENV_URL)
        if url:
            from verifier.provider.refresh import BundleSource

            token_file = Path(os.environ[ENV_TOKEN])
            self._source = BundleSource(private_key, lambda: token_file.read_text().strip(), base_url=url,
                                        interval_s=float(os.environ.get(ENV_REFRESH, "60"))).start()
        del private_key

    def bundle(self) -> GenerationBundle | None:
        if self._source is not None:
            try:
                return self._source.bundle
            except Exception as exc:  # the file bundle stays in use; only the type is logged
                log.warning("bundle refresh failed (%s); using the last bundle", type(exc).__name__)
        return self._bundle


_KEYS: _Keys | None = None
_KEYS_LOCK = threading.Lock()


def keys() -> _Keys:
    global _KEYS
    with _KEYS_LOCK:
        if _KEYS is None:
            _KEYS = _Keys()
        return _KEYS


def reset_keys() -> None:
    """Forget this process's bundle (tests; a changed environment)."""
    global _KEYS
    with _KEYS_LOCK:
        _KEYS = None


# --- admission ------------------------------------------------------------------------------------------


def payload_of(sampling_params: Any) -> Mapping[str, int] | None:
    extra = getattr(sampling_params, "extra_args", None) or {}
    fields = extra.get(EXTRA_KEY)
    if fields is None:
        return None
    if not isinstance(fields, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in fields.items()
    ):
        raise ValueError(f"extra_args[{EXTRA_KEY!r}] must map field names to integers")
    return fields


def validate_request(sampling_params: Any) -> None:
    """Admission check (vLLM's `validate_params`): ValueError -> the request is refused with HTTP 400."""
    fields = payload_of(sampling_params)
    if fields is None:
        if enforced():
            raise ValueError(f"this engine watermarks every request: SamplingParams.extra_args[{EXTRA_KEY!r}] "
                             "with the payload fields is required")
        return
    if (getattr(sampling_params, "temperature", 1.0) or 0.0) < _EPS:
        raise ValueError("a watermarked request needs sampling (temperature > 0)")
    bundle = keys().bundle()
    if bundle is None:
        raise ValueError("this engine has no HeRo bundle configured (HERO_VLLM_BUNDLE / HERO_VLLM_PRIVATE_KEY)")
    encode_payload(bundle.profile, fields)  # PayloadError (a ValueError) names the bad field


# --- per-request state, indexed by slot (a batch row in the legacy runner, a request slot in MRV2) ---------


class _Slots:
    """Payloads, warping parameters, step counters and context logs of up to `n` requests, on `device`."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.n, self.device = n, device
        self.sampler: FusedSampler | None = None
        self._bundle_id: str | None = None
        self.samplers: list[FusedSampler | None] = [None] * n  # the tables each request started with
        self.payload: torch.Tensor | None = None
        self.generated = torch.zeros(n, dtype=torch.int64, device=device)
        self.log: ContextLog | None = None
        self.opening: OpeningGate | None = None
        self.temperature = torch.ones(n, device=device)
        self.min_p = torch.zeros(n, device=device)
        self.top_k = torch.zeros(n, dtype=torch.int64, device=device)
        self.top_p = torch.ones(n, device=device)
        self.host = [dict(temperature=1.0, min_p=0.0, top_k=0, top_p=1.0) for _ in range(n)]

    def _current(self) -> FusedSampler:
        bundle = keys().bundle()
        if bundle is None:
            raise ValueError("no HeRo bundle configured")
        if self.sampler is None or bundle.bundle_id != self._bundle_id:
            from verifier.provider.hf import fused_sampler

            profile = bundle.profile
            if self.sampler is not None and (profile.segments, profile.depth, profile.context_width) != (
                    self.sampler.base.segments, self.sampler.base.levels, self.sampler.h):
                raise ValueError("a bundle rotation may change keys, not the profile's shape")
            self.sampler = fused_sampler(bundle, self.device)
            self._bundle_id = bundle.bundle_id
            self.profile = profile
            if self.payload is None:
                self.payload = torch.zeros(self.n, profile.segments, profile.depth, dtype=torch.int64,
                                           device=self.device)
                self.log = self.sampler.new_log(self.n)
                self.opening = new_opening(profile, self.n, device=self.device)
        return self.sampler

    def add(self, slot: int, sp: Any, tokens: list[int] | None = None) -> bool:
        """(Re)initialise `slot` for a request; True when it is watermarked. `tokens`: output ids already
        generated (a resumed request), whose continuation contexts are logged again."""
        fields = payload_of(sp)
        self.samplers[slot] = None
        if fields is None:
            return False
        sampler = self._current()
        pay = encode_payload(self.profile, fields)
        self.payload[slot] = torch.tensor(pay, dtype=torch.int64, device=self.device)
        self.samplers[slot] = sampler
        temperature = max(float(sp.temperature), _EPS)
        self.temperature[slot] = temperature
        top_k = int(sp.top_k or 0)
        top_k = 0 if top_k < 0 else top_k
        self.host[slot] = dict(temperature=temperature, min_p=float(sp.min_p or 0.0), top_k=top_k,
                               top_p=float(sp.top_p or 1.0))
        self.min_p[slot], self.top_k[slot], self.top_p[slot] = (self.host[slot][k] for k in ("min_p", "top_k",
                                                                                              "top_p"))
        self.generated[slot] = 0
        self.log.counts[slot] = 0
        if self.opening is not None:  # a resumed request drew its opening before it was preempted
            self.opening.reset([slot], opened=bool(tokens))
        if tokens:
            self._replay(slot, tokens)
        return True

    def _replay(self, slot: int, ids: list[int]) -> None:
        """Log the continuation contexts of output `ids` already drawn (token g >= h has context ids[g-h:g])."""
        h = self.sampler.h
        seen: dict[tuple[int, ...], None] = {}
        for g in range(h, len(ids)):
            seen.setdefault(tuple(ids[g - h: g]), None)
        if seen:
            self.log.ensure(len(seen) + 1)
            words = torch.stack(prf.context_words(torch.tensor(list(seen), dtype=torch.int64)), dim=1)
            self.log.words[slot, : len(seen)] = words.to(self.device)
            self.log.counts[slot] = len(seen)

    def move(self, a: int, b: int, swap: bool) -> None:
        """Batch row a -> b (legacy runner's condense) or a <-> b."""
        tensors = [self.generated, self.temperature, self.min_p, self.top_k, self.top_p]
        if self.payload is not None:
            tensors += [self.payload, self.log.words, self.log.counts]
        if self.opening is not None:
            tensors.append(self.opening.need)
        idx = torch.tensor([a, b] if swap else [a], device=self.device)
        dst = torch.tensor([b, a] if swap else [b], device=self.device)
        for t in tensors:
            t[dst] = t[idx]
        if swap:
            self.samplers[a], self.samplers[b] = self.samplers[b], self.samplers[a]
            self.host[a], self.host[b] = self.host[b], self.host[a]
        else:
            self.samplers[b], self.host[b] = self.samplers[a], self.host[a]
            self.samplers[a] = None

    def warp(self, logits: torch.Tensor, slots: torch.Tensor, host_slots: list[int]) -> torch.Tensor:
        """vLLM's order: temperature, min_p, top-k, top-p; per row (slot) parameters. Rows that need none of
        them (temperature 1, no truncation: the plain sampling setting) are handed on as they are, uncopied."""
        hp = [self.host[s] for s in host_slots]
        if logits.dtype == torch.float32 and all(p["temperature"] == 1.0 and p["min_p"] <= 0 and p["top_k"] <= 0
                                                 and p["top_p"] >= 1.0 for p in hp):
            return logits
        x = logits.to(torch.float32) / self.temperature[slots].unsqueeze(1)
        if any(p["min_p"] > 0 for p in hp):
            probs = torch.softmax(x, dim=-1)
            floor = probs.amax(dim=-1, keepdim=True) * self.min_p[slots].unsqueeze(1)
            x = x.masked_fill(probs < floor, float("-inf"))
        if any(p["top_k"] > 0 or p["top_p"] < 1.0 for p in hp):
            vals, idx = x.sort(dim=-1, descending=True)
            rank = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            k = self.top_k[slots].unsqueeze(1)
            drop = (k > 0) & (rank >= k)
            vals = vals.masked_fill(drop, float("-inf"))
            p = torch.softmax(vals, dim=-1)
            before = p.cumsum(dim=-1) - p  # mass strictly above each rank
            vals = vals.masked_fill((before >= self.top_p[slots].unsqueeze(1)) & (rank > 0), float("-inf"))
            x = torch.full_like(x, float("-inf")).scatter_(1, idx, vals)
        return x

    def draw(self, logits: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, host_slots: list[int],
             contexts: torch.Tensor, generator: torch.Generator | None, every_row: bool = False) -> torch.Tensor:
        """Token ids for `rows` of `logits` (request state at `slots`), grouped by the tables each request uses.
        `every_row`: the caller knows `rows` is every row of `logits` in order (no gather copy)."""
        out = torch.empty(len(host_slots), dtype=torch.int64, device=logits.device)
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(host_slots):
            groups.setdefault(id(self.samplers[s]), []).append(i)
        warped = self.warp(logits if every_row else logits[rows], slots, host_slots)
        for members in groups.values():
            sampler = self.samplers[host_slots[members[0]]]
            if sampler is None:  # unwatermarked rows (MRV2 hands every row): the caller keeps their logits
                out[torch.tensor(members, device=logits.device)] = 0
                continue
            if len(groups) == 1:
                out = sampler.step(warped, contexts, self.payload, self.generated, self.log, generator, slots=slots,
                                   opening=self.opening)
                break
            sel = torch.tensor(members, device=logits.device)
            out[sel] = sampler.step(warped[sel], contexts[sel], self.payload, self.generated, self.log, generator,
                                    slots=slots[sel], opening=self.opening)
        return out


def _one_hot_rows(logits: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor, every_row: bool = False) -> None:
    if every_row:  # in place, as transformers' processors do: no index_put over [B, V]
        logits.fill_(float("-inf")).scatter_(1, tokens.unsqueeze(1), 0.0)
        return
    logits[rows] = float("-inf")
    logits[rows, tokens] = 0.0


def _new_generator(device: torch.device) -> torch.Generator:
    import secrets

    g = torch.Generator(device=device)
    g.manual_seed(secrets.randbits(63))
    return g


def _refuse_speculative(vllm_config: Any) -> None:
    if getattr(vllm_config, "speculative_config", None) is not None:
        raise ValueError("the HeRo watermark does not support speculative decoding (draft tokens are not "
                         "watermarked draws); turn it off on engines that serve watermarked requests")


# --- legacy V1 model runner ---------------------------------------------------------------------------------


class HeroV1LogitsProcessor(V1LogitsProcessor):
    """Legacy V1 runner: rows are batch indices; `update_state` adds, removes and moves them."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        _refuse_speculative(vllm_config)
        self.device = torch.device(device)
        n = int(vllm_config.scheduler_config.max_num_seqs)
        self.slots = _Slots(n, self.device)
        self.reqs: dict[int, tuple[list[int], list[int]]] = {}  # row -> (prompt ids, live output ids)
        self.generator = _new_generator(self.device)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate_request(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for row in batch_update.removed:
            self.reqs.pop(row, None)
        for row, sp, prompt, output in batch_update.added:
            self.reqs.pop(row, None)
            if self.slots.add(row, sp, list(output) if output else None):
                if prompt is None:
                    raise ValueError("a watermarked request needs prompt token ids (no prompt embeddings)")
                self.reqs[row] = (prompt, output)
        for a, b, direction in batch_update.moved:
            swap = direction == MoveDirectionality.SWAP
            self.slots.move(a, b, swap)
            ra, rb = self.reqs.pop(a, None), self.reqs.pop(b, None)
            if ra is not None:
                self.reqs[b] = ra
            if swap and rb is not None:
                self.reqs[a] = rb

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.reqs:
            return logits
        rows = sorted(r for r in self.reqs if r < logits.shape[0])
        if not rows:
            return logits
        h = self.slots.sampler.h
        ctx, gen = [], []
        for r in rows:
            prompt, output = self.reqs[r]
            ctx.append(context_tail(prompt, output, h))
            gen.append(len(output))
        rows_t = torch.tensor(rows, device=logits.device)
        self.slots.generated[rows_t] = torch.tensor(gen, device=self.device)
        self.slots.log.ensure(max(gen) + 1)
        contexts = torch.tensor(ctx, dtype=torch.int64, device=self.device)
        every = rows == list(range(logits.shape[0]))  # the usual case: every row watermarked
        tokens = self.slots.draw(logits, rows_t, rows_t, rows, contexts, self.generator, every_row=every)
        _one_hot_rows(logits, rows_t, tokens.to(logits.device), every_row=every)
        return logits


# --- Model Runner V2 (written against its interface; untested here: it needs a GPU) ------------------------


class HeroV2LogitsProcessor(V2LogitsProcessor):
    """MRV2: per-request state keyed by recycled request slots (re-initialised in `add_request`); `apply` gets
    rows in any order with `ctx.expanded_idx_mapping` (row -> slot); contexts come from the runner's on-device
    token history, so a step needs no host sync."""

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        _refuse_speculative(vllm_config)
        self.req_states = req_states
        self.device = torch.device(req_states.device)
        n = int(req_states.max_num_reqs)
        self.slots = _Slots(n, self.device)
        self.watermarked = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.host_marked = [False] * n
        self.generator = _new_generator(self.device)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate_request(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        marked = self.slots.add(req_idx, sampling_params)
        self.watermarked[req_idx] = marked
        self.host_marked[req_idx] = marked
        return marked

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not any(self.host_marked[int(s)] for s in ctx.idx_mapping_np):
            return logits
        h = self.slots.sampler.h
        slots = ctx.expanded_idx_mapping.to(torch.int64)
        pos = ctx.pos.to(torch.int64)  # position of the token fed; the sampled token goes to pos + 1
        hist = self.req_states.all_token_ids.gpu if hasattr(self.req_states.all_token_ids, "gpu") \
            else self.req_states.all_token_ids
        cols = (pos.unsqueeze(1) + torch.arange(1 - h, 1, device=pos.device)).clamp(min=0)
        contexts = hist[slots.unsqueeze(1), cols].to(torch.int64)
        contexts[:, -1] = ctx.input_ids.to(torch.int64)
        prompt_len = self.req_states.prompt_len.gpu if hasattr(self.req_states.prompt_len, "gpu") \
            else self.req_states.prompt_len
        self.slots.generated[slots] = pos + 1 - prompt_len[slots].to(torch.int64)
        self.slots.log.ensure(int(ctx.seq_lens_upper_bound_np.max()) + 1)
        rows = torch.arange(logits.shape[0], device=logits.device)
        host_slots = [int(s) for s in ctx.idx_mapping_np]  # no spec decode: one row per request
        tokens = self.slots.draw(logits, rows, slots, host_slots, contexts, self.generator, every_row=True)
        keep = self.watermarked[slots]
        onehot = torch.full_like(logits, float("-inf")).scatter_(1, tokens.unsqueeze(1), 0.0)
        return torch.where(keep.unsqueeze(1), onehot, logits)


class HeroLogitsProcessor(HeroV2LogitsProcessor):
    """The class on vLLM's entry point: an MRV2 processor, or a legacy one for the legacy constructor."""

    def __new__(cls, vllm_config: Any, *args: Any, **kwargs: Any):
        if len(args) == 2 or "device" in kwargs:  # legacy: (vllm_config, device, is_pin_memory)
            return HeroV1LogitsProcessor(vllm_config, *args, **kwargs)
        return super().__new__(cls)
