"""The weighted decode alone (no LM): the same random texts under each statistic, alternated in one run.

Model-aware scoring's cost beyond the LM re-run is the weighted statistic's tails; the union (spec 16.5) reads
three parts for up to six candidates per cell. Random ids and random level probabilities (the cost does not
depend on them); profile v3, levels 1 and 2. Prints texts/s per statistic (median of --rounds).

    python benchmarks/bench_weighted_decode.py --texts 16 --tokens 200 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from verifier.engine.decoder import Decoder
from verifier.engine.keys import derive_level_table, new_master_secret
from verifier.engine.profile import resolve_profile
from verifier.engine.reference import scored_positions
from verifier.engine.weighted_decode import STATISTICS, WeightedDecoder, Weighting


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    prof = resolve_profile("v3")
    dec = Decoder(prof, {lv: [derive_level_table(new_master_secret(), prof, lv, "v")] for lv in (1, 2)})
    rng = np.random.default_rng(0)
    texts = rng.integers(0, prof.vocab_size, (a.texts, a.tokens)).tolist()
    probs = [rng.uniform(0.05, 1.0, (len(scored_positions(t, prof.context_width)), 2)) for t in texts]
    times: dict[str, list[float]] = {s: [] for s in STATISTICS}
    for _ in range(a.rounds):
        for s in STATISTICS:
            w = [Weighting(s)(p) for p in probs]
            t0 = time.perf_counter()
            WeightedDecoder(dec, statistic=s).decode_ids(texts, w)
            times[s].append(time.perf_counter() - t0)
    print(json.dumps({"texts": a.texts, "tokens": a.tokens, "rounds": a.rounds,
                      "texts_per_s": {s: round(a.texts / statistics.median(t), 1) for s, t in times.items()}}))


if __name__ == "__main__":
    main()
