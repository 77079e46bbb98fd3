"""Weighted vs equal-weight scoring on the synthetic LM (random logits; tests/helpers/synthetic.py): a quick,
model-free-of-LM check of the weighted statistic's power and robustness where SmolLM2 generation is too slow.

Weights: the generator's own level probabilities (the upper bound of model-aware scoring) and the same made
wrong ("off": each log-probability perturbed by N(0, 1) noise before the weight is taken: a verifier whose
model differs from the generator's), each at clip 4; 20 % replaced tokens (random ids). Exact level-2 value
(per-value, 4096 values) released at 25 / 50 / 100 tokens, Wilson 95 % intervals. The product's step draws the
texts, its gated opening from fresh OS randomness, so one run of 100 texts moves by more than its interval from run
to run: `--runs N` pools N independent generations (payloads, generator seed and opening each new).

    PYTHONPATH=. python research/score_v3_synthetic.py --texts 100 --runs 5 --sigma 4
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
import torch

from hero_eval.metrics import wilson
from tests.helpers.keys import make_keyset
from tests.helpers.synthetic import generate
from verifier.engine import reference
from verifier.engine.decoder import Decoder
from verifier.engine.profile import make_profile
from verifier.engine.weighted_decode import WeightedDecoder, Weighting

PROFILE = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,), context_width=3, spec_version=2)


def one_run(args: argparse.Namespace, run: int, dec: Decoder, wdec: WeightedDecoder, keys) -> dict:
    """(tokens, edit, weighting) -> (exact, wrong) counts over one generation of `args.texts` texts."""
    rng = random.Random(run)
    pays = [{"level1": rng.randrange(4096), "level2": rng.randrange(4096)} for _ in range(args.texts)]
    probs: list = []
    ids = generate(PROFILE, keys, pays, 100, seed=1 + run, sigma=args.sigma, probs=probs).tolist()
    p = torch.stack(probs, dim=1).numpy()
    noise = np.random.default_rng(2 + run)
    p_off = np.clip(np.exp(np.log(p) + noise.normal(0, 1, p.shape)), 1e-12, 1.0)
    counts: dict = {}
    h = PROFILE.context_width
    for n in (25, 50, 100):
        for edit in (0.0, 0.2):
            batch, pw, pwo = [], [], []
            for i, x in enumerate(ids):
                y = list(x[:n])
                touched = set()
                if edit:
                    for j in random.Random(i).sample(range(n), round(edit * n)):
                        y[j] = random.Random(j + 7 * i).randrange(PROFILE.vocab_size)
                        touched.add(j)
                pos = reference.scored_positions(y, h)
                # the generator's probabilities at untouched tokens; a replaced token gets a small one (improbable)
                gp = np.array([p[i, t] if t not in touched else [1e-4, 1e-4] for t in pos]).reshape(-1, 2)
                go = np.array([p_off[i, t] if t not in touched else [1e-4, 1e-4] for t in pos]).reshape(-1, 2)
                batch.append(y)
                pw.append(Weighting()(gp))
                pwo.append(Weighting()(go))
            res = {"equal": dec.decode_ids(batch), "generator": wdec.decode_ids(batch, pw),
                   "off": wdec.decode_ids(batch, pwo)}
            for name, rs in res.items():
                k = sum(r.levels[1].fields == {"level2": q["level2"]} for r, q in zip(rs, pays, strict=True))
                bad = sum(r.levels[1].status == "decoded" and r.levels[1].fields != {"level2": q["level2"]}
                          for r, q in zip(rs, pays, strict=True))
                counts[(n, edit, name)] = (k, bad)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=100, help="texts per run")
    ap.add_argument("--runs", type=int, default=1, help="independent generations pooled")
    ap.add_argument("--sigma", type=float, default=4.0)
    args = ap.parse_args()
    keys = make_keyset(PROFILE, 1)
    dec = Decoder(PROFILE, {1: [keys.tables[0]], 2: [keys.tables[1]]})
    wdec = WeightedDecoder(dec)
    runs = [one_run(args, r, dec, wdec, keys) for r in range(args.runs)]
    total = args.texts * args.runs
    out: dict = {"sigma": args.sigma, "texts": args.texts, "runs": args.runs}
    for key in runs[0]:
        n, edit, name = key
        k, bad = sum(r[key][0] for r in runs), sum(r[key][1] for r in runs)
        lo, hi = wilson(k, total)
        per_run = " ".join(f"{r[key][0] / args.texts:.2f}" for r in runs)
        out[f"exact_{n}t_edit{int(edit * 100)}_{name}"] = (f"{k / total:.2f} [{lo:.2f}, {hi:.2f}] wrong={bad}"
                                                          f" runs: {per_run}")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
