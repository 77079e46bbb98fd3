"""Formatting shared by the report sections (kept apart so that sections never import the report)."""

from __future__ import annotations

import math


def ci_text(d: dict | None, key: str = "mean") -> str:
    if not d or d.get(key) is None or (isinstance(d.get(key), float) and math.isnan(d[key])):
        return "—"
    if key == "median":  # perplexities
        return f"{d[key]:.1f} [{d['lo']:.1f}, {d['hi']:.1f}]"
    return f"{d[key]:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"


def paired_values(values: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Per-prompt log(PPL / PPL_unwatermarked): median and Wilcoxon signed-rank p (lists aligned by prompt)."""
    base = values.get("unwatermarked")
    if not base:
        return {}
    try:
        from scipy.stats import wilcoxon
    except ImportError:
        return {}
    out = {}
    for name, vals in values.items():
        if name == "unwatermarked" or not vals:
            continue
        pairs = [(a, b) for a, b in zip(vals, base, strict=False) if a > 0 and b > 0]
        if len(pairs) < 6:
            continue
        lr = sorted(math.log(a / b) for a, b in pairs)
        out[name] = (lr[len(lr) // 2], float(wilcoxon(lr).pvalue))
    return out
