"""Watermark overhead in model.generate (SmolLM2) over plain multinomial sampling.

    python benchmarks/bench_generate.py [--batches 1,4,16,32,64] [--tokens 32] [--reps 3]
"""

from __future__ import annotations

import argparse

from _common import emit

from verifier.cli.bench_figures import generate_figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,4,16,32,64")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        emit(generate_figures(b, a.tokens, a.reps, a.model))


if __name__ == "__main__":
    main()
