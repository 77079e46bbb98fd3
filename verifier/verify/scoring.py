"""The service's scoring choice: model-free (default) or model-aware (HERO_MODEL_AWARE=1, `hero decode --model-aware`).

Model-aware scoring re-runs the profile's language model over each text (engine/model_aware.py) on the worker's
device; the model comes from verifier.lm, loaded once per process and device.
"""

from __future__ import annotations

from verifier.engine.model_aware import DeploymentSampling, ModelAwareScorer
from verifier.engine.weighted_decode import DEFAULT_EDIT_FLOORS, DEFAULT_STATISTIC, Weighting


def _load(name: str, device: str, revision: str | None = None):
    """The profile's model (`name` at hub `revision` when the profile pins one) on `device`."""
    from verifier import lm  # looked up per call: one loaded model per (name, device, revision), memoised there

    if revision is None:
        return lm.load_model(name, device)[0]
    return lm.load_model(name, device, revision=revision)[0]


def deployment_sampling(settings) -> DeploymentSampling:
    """HERO_MODEL_AWARE_TEMPERATURE / _TOP_K / _TOP_P as the scorer's DeploymentSampling."""
    return DeploymentSampling(temperature=settings.model_aware_temperature, top_k=settings.model_aware_top_k,
                              top_p=settings.model_aware_top_p)


def model_aware_limits(settings) -> dict:
    """HERO_MODEL_AWARE_MAX_TOKENS / _BATCH_TOKENS / _DEADLINE_SECONDS as the scorer's cost bounds."""
    return {"max_tokens": settings.model_aware_max_tokens, "batch_tokens": settings.model_aware_batch_tokens,
            "deadline_s": settings.model_aware_deadline_seconds}


def model_aware_scorer(enabled: bool, device: str = "cpu", sampling: DeploymentSampling | None = None,
                       statistic: str = DEFAULT_STATISTIC,
                       edit_floors: tuple[float, ...] = DEFAULT_EDIT_FLOORS, **limits) -> ModelAwareScorer | None:
    """The scorer for HERO_MODEL_AWARE (`device` "auto": CUDA when present), None for model-free scoring;
    `limits`: its cost bounds (`model_aware_limits`)."""
    if not enabled:
        return None
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return ModelAwareScorer(_load, device, weighting=Weighting(statistic, edit_floors=tuple(edit_floors)),
                            sampling=sampling, **limits)
