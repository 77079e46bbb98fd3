"""Calibration of a private level's p-value under a table its texts were not made with (spec section 9).

    python research/calibration_foreign_level2.py [--keysets 1000] [--texts 180] [--jobs 2]

The setting of tests/engine/test_disclosure_and_decoder.py::test_public_only_verifier_decodes_private_bits_at_chance:
texts watermarked by the synthetic LM under a fresh key set, decoded with the right level-1 table and a
guessed level-2 table (fresh CSPRNG master). Under the null every candidate's evidence is Exp(1), so the
level-2 p-values must be uniform, however strongly the text is marked under its real keys. Prints one JSON
line: the count of p <= 10^-k against the expected count, with the Poisson upper-tail probability of a count
at least that large, and the KS test against the uniform.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from multiprocessing import Pool
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one process per core, not two thread pools per core

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.helpers of this checkout

from tests.helpers.keys import make_keyset
from tests.helpers.synthetic import generate
from verifier.engine.decoder import Decoder
from verifier.engine.profile import make_profile

PROFILE = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,))


def one_keyset(args: tuple[int, int]) -> list[float]:
    """log10 level-2 p-values of `n` texts made under one fresh key set, decoded with a guessed level-2 table."""
    seed, n = args
    ks = make_keyset(PROFILE, 1)
    rng = np.random.default_rng(seed)
    payloads = [{"level1": int(rng.integers(4096)), "level2": int(rng.integers(4096))} for _ in range(n)]
    ids = generate(PROFILE, ks, payloads, 200, seed=seed).tolist()
    guess = make_keyset(PROFILE, 9).tables[1]
    return [r.levels[1].log10_p_value for r in Decoder(PROFILE, {1: [ks.tables[0]], 2: [guess]}).decode_ids(ids)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keysets", type=int, default=1000)
    ap.add_argument("--texts", type=int, default=180, help="texts per key set (the test's 180)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with Pool(a.jobs) as pool:
        lp = np.concatenate(pool.map(one_keyset, [(a.seed + i, a.texts) for i in range(a.keysets)]))
    n = len(lp)
    tails = {}
    for k in (1, 2, 3, 4, 5):
        count, expected = int((lp <= -k).sum()), n * 10.0**-k
        tails[f"p<=1e-{k}"] = {"count": count, "expected": expected,
                               "poisson_sf": float(stats.poisson.sf(count - 1, expected))}
    print(json.dumps({"bench": "calibration-foreign-level2", "texts": n, "keysets": a.keysets, "tails": tails,
          "ks_pvalue": float(stats.kstest(10.0**lp, "uniform").pvalue), "min_log10_p": float(lp.min())}), flush=True)


if __name__ == "__main__":
    main()
