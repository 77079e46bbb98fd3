"""Evidence-kernel throughput, HeRo^2(2,2) at 24 bits, fast path vs pure torch path in the same run.

    python benchmarks/bench_decode.py [--batches 1,4,16,32,64] [--tokens 200] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse

from _common import emit

from verifier.cli.bench_figures import decode_figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,4,16,32,64")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--torch-reps", type=int, default=3)
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        emit(decode_figures(b, a.tokens, a.device, a.reps, a.torch_reps))


if __name__ == "__main__":
    main()
