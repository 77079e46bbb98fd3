"""One watermarked sampler step (HeroSampler.sample) vs softmax + multinomial, per vocabulary size.

    python benchmarks/bench_sampler.py [--vocabs 32000,49152,262144] [--batches 1,32]
"""

from __future__ import annotations

import argparse

from _common import emit

from verifier.cli.bench import sampler_figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocabs", default="32000,49152,262144")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    for v in (int(x) for x in a.vocabs.split(",")):
        for b in (int(x) for x in a.batches.split(",")):
            emit(sampler_figures(v, b, a.reps, a.device))


if __name__ == "__main__":
    main()
