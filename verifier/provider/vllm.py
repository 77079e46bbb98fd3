"""vLLM plugin: HeRo watermark per request, registered on vLLM's logits-processor entry point.

    pip install hero-verifier            # registers `vllm.logits_processors: hero = verifier.provider.vllm:...`
    HERO_VLLM_BUNDLE=/run/hero/bundle HERO_VLLM_PRIVATE_KEY=/run/hero/x25519.key vllm serve ...
    SamplingParams(..., extra_args={"hero": {"model": 37, "user": 1234}})
    curl .../v1/completions -d '{..., "vllm_xargs": {"hero_model": 37, "hero_user": 1234}}'   # OpenAI server

Configuration (environment, read by the frontend and the engine processes alike; only paths, never keys):
  HERO_VLLM_BUNDLE        file with the sealed bundle (base64 or raw), as `POST /v1/keys/generation-bundle` gives it
  HERO_VLLM_PRIVATE_KEY   file with the provider's raw 32-byte X25519 private key
  HERO_VLLM_URL           optional: the verifier service; then a `BundleSource` keeps the bundle current (token
                          from the file HERO_VLLM_TOKEN_FILE, poll every HERO_VLLM_REFRESH_S, default 60 s) and
                          the file bundle is only the starting point (it may be absent)
  HERO_VLLM_SERVICE_KEY   file with the service's verifier key (`GET /v1/audit/public-key`, `hero audit public-key`):
                          a bundle is used only when its signature checks against it (required with a bundle)
  HERO_VLLM_PROVIDER_ID   this provider's registered id: a bundle for another id is refused (default: the `sub`
                          of the token in HERO_VLLM_TOKEN_FILE)
  HERO_VLLM_ENFORCE=1     refuse (at admission, HTTP 400) every request without a payload; a request that reaches
                          the engine without one anyway is ended there (forced to EOS), never served unwatermarked
Without a bundle configured the plugin is inert: requests without a payload pass untouched, a request with one
is refused. A payload is validated against the bundle's profile at admission (`validate_params`).

The plugin samples the token itself and hands vLLM a one-hot row. vLLM runs custom processors before
temperature / min-p / top-k / top-p (both runners), so the plugin applies the request's own temperature, min_p,
top_k and top_p first (vLLM's order) and draws from that distribution; vLLM's later warpers leave a one-hot row
unchanged. Requests keep the key tables they started with across a bundle rotation. Greedy requests (temperature
0) cannot carry a watermark (refused); speculative decoding is refused (draft tokens are not watermarked draws).

Everything engine-neutral (slot state, bundle refresh, warp order, replay after preemption, the payload parser,
context building, and the serving policy: enforce mode, refused rows forced to EOS, a failed draw ending its
request, speculative decoding refused) is the public seam `verifier/provider/step.py`; this module only
translates vLLM's calls, configuration and batch layout to it.

Two runners, two implementations, one registered class (`HeroLogitsProcessor`): vLLM's MRV2 loader accepts only
subclasses of its V2 base class, the legacy loader only calls the constructor, so the registered class is the
MRV2 implementation and its constructor hands the legacy argument shape `(vllm_config, device, is_pin_memory)`
to `HeroV1LogitsProcessor`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

try:  # Model Runner V2 (vLLM >= 0.32)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - older vLLM: the legacy runner only
    V2LogitsProcessor = V1LogitsProcessor  # type: ignore[misc,assignment]

from verifier.provider.step import (
    EXTRA_KEY,
    BundleKeys,
    RequestSlots,
    parse_payload,
    refuse_speculative,
    validate_payload,
)

__all__ = ["EXTRA_KEY", "HeroLogitsProcessor", "HeroV1LogitsProcessor", "HeroV2LogitsProcessor", "enforced", "keys",
           "payload_of", "reset_keys", "validate_request"]

ENV_BUNDLE, ENV_KEY, ENV_URL, ENV_TOKEN, ENV_REFRESH, ENV_ENFORCE = (
    "HERO_VLLM_BUNDLE", "HERO_VLLM_PRIVATE_KEY", "HERO_VLLM_URL", "HERO_VLLM_TOKEN_FILE", "HERO_VLLM_REFRESH_S",
    "HERO_VLLM_ENFORCE")
ENV_SERVICE_KEY, ENV_PROVIDER_ID = "HERO_VLLM_SERVICE_KEY", "HERO_VLLM_PROVIDER_ID"


def enforced() -> bool:
    return os.environ.get(ENV_ENFORCE, "0").lower() in ("1", "true", "yes")


# --- key material: the seam's BundleKeys from this process's environment ------------------------------


_KEYS: BundleKeys | None = None
_KEYS_LOCK = threading.Lock()


def keys() -> BundleKeys:
    global _KEYS
    with _KEYS_LOCK:
        if _KEYS is None:
            _KEYS = BundleKeys(os.environ.get(ENV_KEY), os.environ.get(ENV_BUNDLE), os.environ.get(ENV_URL),
                               os.environ.get(ENV_TOKEN), float(os.environ.get(ENV_REFRESH, "60")),
                               service_key_file=os.environ.get(ENV_SERVICE_KEY),
                               provider_id=os.environ.get(ENV_PROVIDER_ID) or None)
        return _KEYS


def reset_keys() -> None:
    """Forget this process's bundle (tests; a changed environment)."""
    global _KEYS
    with _KEYS_LOCK:
        _KEYS = None


def _bundle():
    return keys().bundle()


# --- admission ------------------------------------------------------------------------------------------


def payload_of(sampling_params: Any) -> Mapping[str, int] | None:
    """The request's payload fields (`SamplingParams.extra_args["hero"]`, or flat `hero_<field>` keys as the
    OpenAI server's `vllm_xargs` give them), parsed by the seam."""
    return parse_payload(getattr(sampling_params, "extra_args", None))


def validate_request(sampling_params: Any) -> None:
    """Admission check (vLLM's `validate_params`): ValueError -> the request is refused with HTTP 400."""
    fields = payload_of(sampling_params)
    if fields is None:
        if enforced():
            raise ValueError("this engine watermarks every request: give the payload fields, over HTTP as "
                             f'"vllm_xargs": {{"{EXTRA_KEY}_model": 37, "{EXTRA_KEY}_user": 1234}} '
                             f"(one {EXTRA_KEY}_<field> per field), in Python as "
                             f"SamplingParams.extra_args[{EXTRA_KEY!r}]")
        return
    validate_payload(fields, getattr(sampling_params, "temperature", 1.0), _bundle,
                     f"{ENV_BUNDLE} / {ENV_KEY}")


def _params(sp: Any) -> dict[str, Any]:
    """vLLM's SamplingParams -> the seam's warping keywords."""
    return dict(temperature=float(sp.temperature), top_k=int(sp.top_k or 0), top_p=float(sp.top_p or 1.0),
                min_p=float(sp.min_p or 0.0))


def _stop_token(vllm_config: Any) -> int:
    """The model's end-of-sequence id: what a refused row is forced to (its request ends with no model text)."""
    model_config = getattr(vllm_config, "model_config", None)
    for cfg in (getattr(model_config, "hf_text_config", None), getattr(model_config, "hf_config", None)):
        eos = getattr(cfg, "eos_token_id", None)
        if isinstance(eos, (list, tuple)) and eos:
            eos = eos[0]
        if isinstance(eos, int):
            return eos
    return 0


def _slots(vllm_config: Any, n: int, device: torch.device) -> RequestSlots:
    """At engine start: the seam's slots with this engine's policy (speculative decoding refused first, then this
    process's keys built once: a misconfigured bundle stops the engine here, not in a step; enforce mode; the
    model's end-of-sequence id for refused rows)."""
    refuse_speculative(getattr(vllm_config, "speculative_config", None) is not None)
    keys()
    from verifier.provider.vllm_metrics import watch  # on vLLM's /metrics: the bundle's expiry, refusals

    return watch(RequestSlots(n, device, _bundle, stop_token=_stop_token(vllm_config), enforce=enforced()), keys)


# --- legacy V1 model runner ---------------------------------------------------------------------------------


class HeroV1LogitsProcessor(V1LogitsProcessor):
    """Legacy V1 runner: rows are batch indices (the seam's slots); `update_state` adds, removes and moves them."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.device = torch.device(device)
        self.slots = _slots(vllm_config, int(vllm_config.scheduler_config.max_num_seqs), self.device)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate_request(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for row in batch_update.removed:
            self.slots.remove(row)
        for row, sp, prompt, output in batch_update.added:  # output: vLLM's live list of the request's ids
            if self.slots.admit(row, getattr(sp, "extra_args", None), **_params(sp), prompt=prompt,
                                output=output) and prompt is None:  # prompt embeddings: no ids for contexts
                self.slots.fail(row, ValueError("a watermarked request needs prompt token ids"))
        for a, b, direction in batch_update.moved:
            self.slots.move(a, b, direction == MoveDirectionality.SWAP)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return self.slots.step(logits, range(logits.shape[0]))


# --- Model Runner V2 (written against its interface; untested here: it needs a GPU) ------------------------


class HeroV2LogitsProcessor(V2LogitsProcessor):
    """MRV2: per-request state keyed by recycled request slots (re-initialised in `add_request`); `apply` gets
    rows in any order with `ctx.expanded_idx_mapping` (row -> slot); contexts come from the runner's on-device
    token history, so a step needs no host sync."""

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        self.req_states = req_states
        self.device = torch.device(req_states.device)
        self.slots = _slots(vllm_config, int(req_states.max_num_reqs), self.device)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        validate_request(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        # contexts are read from the runner's token history (req_states) at each step
        return self.slots.admit(req_idx, getattr(sampling_params, "extra_args", None), **_params(sampling_params))

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        host_slots = [int(s) for s in ctx.idx_mapping_np]  # no spec decode: one row per request
        if not any(self.slots.watermarked(s) for s in host_slots):
            return self.slots.step(logits, host_slots)  # refused rows only, if any
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
        generated = pos + 1 - prompt_len[slots].to(torch.int64)
        return self.slots.step(logits, host_slots, contexts=contexts, generated=generated,
                               capacity=int(ctx.seq_lens_upper_bound_np.max()) + 1, device_slots=slots)


class HeroLogitsProcessor(HeroV2LogitsProcessor):
    """The class on vLLM's entry point: an MRV2 processor, or a legacy one for the legacy constructor."""

    def __new__(cls, vllm_config: Any, *args: Any, **kwargs: Any):
        if len(args) == 2 or "device" in kwargs:  # legacy: (vllm_config, device, is_pin_memory)
            return HeroV1LogitsProcessor(vllm_config, *args, **kwargs)
        return super().__new__(cls)
