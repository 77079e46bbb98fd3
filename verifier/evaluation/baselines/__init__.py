"""Multi-bit watermark baselines re-implemented from their papers for the evaluation only."""

from verifier.evaluation.baselines.bimark import BiMark
from verifier.evaluation.baselines.mpac import MPAC

__all__ = ["MPAC", "BiMark"]
