"""Multi-bit watermark baselines re-implemented from their papers for the evaluation only."""

from hero_eval.baselines.bimark import BiMark
from hero_eval.baselines.mpac import MPAC

__all__ = ["MPAC", "BiMark"]
