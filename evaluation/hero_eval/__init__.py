"""Reproducible evaluation of HeRo against multi-bit baselines (`hero eval`).

Baselines (MPAC, BiMark) live here, not in the product engine: they exist only to be compared against.
"""

SECTIONS = ("chat", "main", "robustness", "hierarchy", "payload", "gemma", "tokens", "timing", "attribution")
