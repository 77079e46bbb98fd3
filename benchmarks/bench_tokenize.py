"""Tokenization throughput (SmolLM2 fast tokenizer): one batched call vs one call per text.

    python benchmarks/bench_tokenize.py [--batches 1,4,16,32,64] [--tokens 200]
"""

from __future__ import annotations

import argparse

from _common import emit

from verifier.cli.bench import tokenize_figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,4,16,32,64")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        emit(tokenize_figures(b, a.tokens, a.reps))


if __name__ == "__main__":
    main()
