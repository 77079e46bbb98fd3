"""Spec v5's whole-vocabulary Gumbel-max draw in the C generation step: v4 and v5, two checkouts, alternated.

    python benchmarks/bench_v5_draw.py BASE_DIR NEW_DIR [--batch 16] [--vocab 49152] [--topk 0] [--scale 2]
                                       [--steps 5] [--rounds 11]

Logits: N(0, scale) float32 noise [batch, vocab], with --topk K all but each row's K largest at -inf. Four
workers (bench_step_ab.py's, one thread, every row marked): BASE and NEW, each under profiles v4 and v5, rounds
alternating their order. Prints one JSON line: each side's median ms per step, NEW v5 / BASE v5 and NEW v5 / NEW v4
per round (median and a distribution-free 95 % interval), and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import alternate, emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs=2, metavar="DIR")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--topk", type=int, default=0, help="0: dense rows")
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    import torch

    from verifier.base.timing import median_interval

    dirs = [str(Path(d).resolve()) for d in a.dirs]
    x = torch.randn(a.batch, a.vocab, generator=torch.Generator().manual_seed(0)) * a.scale
    if a.topk:
        keep = x.topk(a.topk, dim=1).indices
        x = torch.full_like(x, float("-inf")).scatter(1, keep, x.gather(1, keep))
    worker = str(Path(__file__).resolve().parent / "bench_step_ab.py")
    sides = [(d, p) for d in dirs for p in ("v4", "v5")]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "logits.pt")
        torch.save(x.contiguous(), path)
        secs = alternate([([sys.executable, worker, "--worker", d, path, "--profile", p, "--steps", str(a.steps)], d)
                          for d, p in sides], a.rounds)
    ms = {f"{'base' if i < 2 else 'new'}_{p}": round(1000 * statistics.median(s), 3)
          for i, ((_, p), s) in enumerate(zip(sides, secs, strict=True))}

    def ratio(num: list[float], den: list[float]) -> dict:
        return {k: round(v, 3) for k, v in median_interval([n / d for n, d in zip(num, den, strict=True)]).items()}

    emit({"bench": "v5-draw", "vocab": a.vocab, "batch": a.batch, "topk": a.topk, "scale": a.scale,
          "steps": a.steps, "rounds": a.rounds, "base": dirs[0], "new": dirs[1], "threads": 1, "ms_per_step": ms,
          "new_v5_over_base_v5": ratio(secs[3], secs[1]), "new_v5_over_new_v4": ratio(secs[3], secs[2]),
          "load_avg_1m": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
