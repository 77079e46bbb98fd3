"""Moderator (level 1) and auditor (all levels) decode cost, spec v1 vs v2, interleaved on the same inputs.

    python research/bench_decode_v2.py [--batch 64] [--tokens 200] [--rounds 15]

All four problems run round-robin, so load drift on a shared machine hits them alike; prints median and
best tokens/s per problem and the v2/v1 time ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from gpu.evidence import segment_scores
from verifier.cli.bench_figures import decode_problem
from verifier.engine.profile import default_profile, v1_profile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    torch.set_num_threads(2)
    problems = {
        (spec, levels): decode_problem(a.batch, a.tokens, "cpu", profile=prof, levels=levels)
        for spec, prof in (("v1", v1_profile()), ("v2", default_profile()))
        for levels in (1, 0)
    }
    times: dict[tuple[str, int], list[float]] = {k: [] for k in problems}
    for _ in range(a.rounds):
        for key, (_profile, ids, lengths, kwargs) in problems.items():
            reps = 1 if key == ("v2", 0) else 5
            t0 = time.perf_counter()
            for _ in range(reps):
                segment_scores(ids, lengths, **kwargs)
            times[key].append((time.perf_counter() - t0) / reps)
    n = a.batch * a.tokens
    for (spec, levels), ts in times.items():
        role = "moderator" if levels == 1 else "auditor"
        print(f"{spec} {role}: median {n / statistics.median(ts):,.0f} tok/s, best {n / min(ts):,.0f} tok/s")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"moderator v2/v1 time ratio {med[('v2', 1)] / med[('v1', 1)]:.2f}")
    print(f"auditor v2/v1 time ratio {med[('v2', 0)] / med[('v1', 0)]:.1f}")


if __name__ == "__main__":
    main()
