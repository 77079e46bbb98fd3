"""Timing statistics for throughput figures: `hero bench` and the scripts under benchmarks/ read them alike.

On a shared host the wall time of one run moves with other processes' load, so a figure is a median over
repetitions with its spread (`summary`), a ratio is read per alternated round with a distribution-free interval
(`median_interval`), and the load average says how busy the machine was (`load_average`). Nothing here imports
above the standard library (torch only when a CUDA timing asks to synchronise).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable

__all__ = ["load_average", "median_interval", "summary", "timed"]


def summary(times: list[float]) -> dict[str, float]:
    """min / median / max of the repetitions: the median is the figure, the ends show the noise around it."""
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def median_interval(xs: list[float], level: float = 0.95) -> dict[str, float]:
    """The median of `xs` and a distribution-free interval for it: order statistics x_(k) .. x_(n+1-k), the
    widest k whose binomial coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= `level` (with too few rounds for
    `level`, min .. max and the coverage that has). Rounds of a shared machine are not normal; this needs no
    assumption beyond independent rounds."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("no values")
    tail, k, coverage = 0.0, 1, 1.0 - 2.0 * 0.5 ** n
    for j in range(1, (n + 1) // 2 + 1):  # coverage of [x_(j), x_(n+1-j)] = 1 - 2 P(Bin <= j - 1)
        tail += math.comb(n, j - 1) * 0.5 ** n
        cov = 1.0 - 2.0 * tail
        if cov < level:
            break
        k, coverage = j, cov
    return {"median": statistics.median(s), "lo": s[k - 1], "hi": s[n - k], "coverage": coverage, "n": n}


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none): how busy the machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def timed(fn: Callable[[], object], reps: int, warmup: int = 1, sync: bool = False) -> list[float]:
    """Wall seconds of each of `reps` calls after `warmup` untimed ones (caches, allocator, lazy set-up); `sync`
    waits for the CUDA device around each call, whose kernels otherwise return before they ran."""
    if sync:
        import torch

        barrier: Callable[[], None] = torch.cuda.synchronize
    else:
        def barrier() -> None:
            return None

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        barrier()
        t0 = time.perf_counter()
        fn()
        barrier()
        out.append(time.perf_counter() - t0)
    return out
