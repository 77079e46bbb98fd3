"""Sampling settings of the evaluation: plain T = 1 and a typical provider setting (top-k 50, top-p 0.9).

Every method samples under the same setting: HeRo applies the warpers itself before its keyed draw
(its processor returns a one-hot row), the baselines bias the logits and `generate` applies the same
warpers after them (transformers runs user processors before its own warpers). A setting is part of the
generation cache key, so texts of one setting are never re-used for another.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import LogitsProcessorList

from verifier.engine.warpers import make_warpers


@dataclass(frozen=True)
class Sampling:
    name: str
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    @property
    def cache_suffix(self) -> str:
        """'' for plain T = 1 (the cache files of earlier runs stay valid), else e.g. '_k50p0.9'."""
        return "" if self == T1 else f"_{self.name}"

    def warpers(self) -> LogitsProcessorList:
        return make_warpers(self.temperature, self.top_k, self.top_p)

    def generate_kwargs(self) -> dict:
        """What `model.generate` applies after the user processors (baselines, unwatermarked)."""
        return {"temperature": self.temperature, "top_k": self.top_k or 0, "top_p": self.top_p or 1.0}

    def describe(self) -> str:
        if self == T1:
            return "T = 1 (no top-k/top-p)"
        parts = [f"T = {self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k {self.top_k}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        return ", ".join(parts)


T1 = Sampling("T1")
PROVIDER = Sampling("k50p0.9", top_k=50, top_p=0.9)
T07 = Sampling("T0.7", temperature=0.7)  # the chat setting's second sampling (temperature alone)
SETTINGS: dict[str, Sampling] = {s.name: s for s in (T1, PROVIDER, T07)}
NEUTRAL = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}

# The setting of the collusion/linkage experiment (a provider's typical sampling).
COLLUSION_SETTING = PROVIDER
