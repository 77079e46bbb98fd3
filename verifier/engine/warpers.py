"""The generator's sampling warpers (temperature, top-k, top-p) as transformers builds them: generation
(verifier/provider/generation.py) applies them before the watermark's draw, and model-aware scoring
(verifier/engine/model_aware.py) replays the same ones, so both see the same distribution."""

from __future__ import annotations

from transformers import LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


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
