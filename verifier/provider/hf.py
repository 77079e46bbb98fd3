"""transformers integration: `model.generate(..., watermarking_config=HeroWatermarkingConfig(bundle, payloads))`.

transformers appends the watermarking config's processor after every warper (temperature, top-k, top-p,
min-p, ...), so the processor receives the already warped scores: it draws the token with the fused
watermark step (gpu/step.py) from exactly that distribution and returns a one-hot row, which transformers'
own softmax + multinomial then return unchanged. Temperature/top-k/top-p stay transformers' own settings.

Key material stays in memory: `to_dict`, `to_json_string`, `repr` and iteration show the bundle's id,
profile name, key versions and the row count only; `deepcopy` (transformers copies the generation config
on every call) returns the same object; pickling is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers.generation.configuration_utils import BaseWatermarkingConfig

from gpu.step import FusedSampler
from verifier.engine.fused import make_fused_sampler, new_opening
from verifier.engine.payload import encode_payload
from verifier.provider.bundle import GenerationBundle
from verifier.provider.generation import WatermarkProcessor

__all__ = ["HeroWatermarkProcessor", "HeroWatermarkingConfig", "fused_sampler"]


def fused_sampler(bundle: GenerationBundle, device: str | torch.device = "cpu") -> FusedSampler:
    """The fused step's sampler for an opened bundle on `device` (key tables copied there once)."""
    return make_fused_sampler(bundle.profile, bundle.keyset, device)


class HeroWatermarkProcessor(WatermarkProcessor):
    """One `generate` call's watermark (the engine's processor without warpers: transformers applied its own).

    Its payload rows meet the batch at the first step: one payload (broadcast) covers every row; `n` payloads
    and a batch of `n * k` rows (`num_return_sequences=k`: transformers repeats each input row k times in a row)
    give each payload to its k rows."""

    def __init__(self, *args: Any, profile: Any = None, opening_nats: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._profile, self._opening_nats = profile, opening_nats

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, rows = input_ids.shape[0], self.payload.shape[0]
        if self.prompt_length is None and b != rows and b % rows == 0:  # the first step meets the batch
            self.payload = self.payload.repeat_interleave(b // rows, dim=0)
            self.log = self.sampler.new_log(b)
            if self.opening is not None:
                self.opening = new_opening(self._profile, b, self._opening_nats, self.device)
        return super().__call__(input_ids, scores)


class HeroWatermarkingConfig(BaseWatermarkingConfig):
    """HeRo watermark for `model.generate(..., watermarking_config=cfg, do_sample=True)`.

    `bundle` is an opened `GenerationBundle`; `payloads` the fields of every row (one dict: broadcast to the
    whole batch, as transformers' own watermarking configs are batch-independent) or a list, `payloads[i]` the
    fields of prompt i (with `num_return_sequences=k`, each of its k sequences); validated against the bundle's
    profile now (`PayloadError`). `generator` (optional) supplies the fresh randomness of unmarked
    tokens (default: seeded from the OS per `generate` call). `opening_nats`: the gated opening's
    threshold (gpu/opening.py; default `OPENING_NATS`, 0: only the first h tokens fresh).
    """

    def __init__(self, bundle: GenerationBundle, payloads: Mapping[str, int] | Sequence[Mapping[str, int]],
                 generator: torch.Generator | None = None, opening_nats: float | None = None) -> None:
        if not isinstance(bundle, GenerationBundle):
            raise TypeError("bundle must be an opened GenerationBundle (verifier.provider.open_bundle)")
        self._bundle = bundle
        self._broadcast = isinstance(payloads, Mapping)
        self._payloads = [encode_payload(bundle.profile, p) for p in ([payloads] if self._broadcast else payloads)]
        self._generator = generator
        self._opening_nats = opening_nats
        self._samplers: dict[str, FusedSampler] = {}
        self.validate()

    # --- what transformers calls ------------------------------------------------------------------

    def validate(self) -> None:
        if not self._payloads:
            raise ValueError("HeroWatermarkingConfig needs a payload (one for every row, or one per prompt)")
        self._bundle.require_fresh()  # BundleExpired (a ValueError)

    def construct_processor(self, vocab_size: int, device: str | torch.device | None = None) -> HeroWatermarkProcessor:
        profile = self._bundle.profile
        if vocab_size != profile.vocab_size:
            raise ValueError(f"model vocabulary {vocab_size} != the bundle profile's vocab_size {profile.vocab_size}")
        dev = torch.device(device or "cpu")
        sampler = self._samplers.get(str(dev))
        if sampler is None:
            sampler = self._samplers[str(dev)] = fused_sampler(self._bundle, dev)
        payload = torch.tensor(self._payloads, dtype=torch.int64, device=dev)
        opening = new_opening(profile, len(self._payloads), self._opening_nats, dev)
        return HeroWatermarkProcessor(sampler, payload, self._generator, opening, profile=profile,
                                      opening_nats=self._opening_nats)

    # --- never key material -----------------------------------------------------------------------

    @property
    def key_versions(self) -> dict[int, str]:
        return dict(self._bundle.key_versions)

    def to_dict(self) -> dict[str, Any]:
        b = self._bundle
        return {"watermark": "hero", "bundle_id": b.bundle_id, "profile": b.profile.name,
                "key_versions": {str(k): v for k, v in sorted(b.key_versions.items())},
                "rows": "all" if self._broadcast else len(self._payloads)}

    def to_json_string(self) -> str:
        import json

        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def __iter__(self):
        yield from self.to_dict().items()

    def __repr__(self) -> str:
        d = self.to_dict()
        return f"HeroWatermarkingConfig(bundle_id={d['bundle_id']!r}, profile={d['profile']!r}, rows={d['rows']})"

    def __deepcopy__(self, memo: dict) -> HeroWatermarkingConfig:
        return self  # immutable; per-call state lives in the processor

    def __reduce__(self):
        raise TypeError("HeroWatermarkingConfig holds key material and cannot be pickled")

    def update(self, **kwargs: Any) -> None:
        raise TypeError("HeroWatermarkingConfig is immutable; make a new one")

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs: Any):
        raise TypeError("a HeroWatermarkingConfig is made from an opened bundle, not from a dict")
