"""False attribution of model-aware scoring on human text: the evaluation's human BBC texts, all of them.

`hero eval` decodes its 2,000 human texts model-free, but model-aware on fewer (a cap: one LM pass per text);
this reads the same texts (same seed, same prompt articles held out, cut to 50 and 200 generator tokens and
re-tokenized as a verifier receives them) with HeRo-v3's evaluation keys, model-free and model-aware (the
service's default union with edit readings), and counts what the issue's false-attribution row asks: any
value released at any level (`model` or `user`), texts called watermarked at p <= 1e-3 (the FPR the detection
rows use) and the p-value tails (a union bound: P[p <= t] <= t, up to 9x below t; one-sided binomial test).

    python research/model_aware_humans.py --humans 2000 --json research/results/model-aware-humans.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from scipy import stats as sps

from hero_eval.attribution import build_attr_method
from hero_eval.metrics import wilson
from hero_eval.runner import Config, Runner, cache_root
from verifier.lm import load_model

TAILS = (1e-3, 1e-2, 0.05, 0.1, 0.2, 0.5)


def summary(results, seconds: float) -> dict:
    n = len(results)
    released = [i for i, r in enumerate(results) if any(
        any(v is not None for v in (lv.fields or {}).values()) or lv.candidates for lv in r.levels)]
    p = [r.p_value for r in results]
    lo, hi = wilson(len(released), n)
    out = {"n": n, "released": len(released), "released_ci95": [round(lo, 5), round(hi, 5)],
           "released_texts": released, "watermarked_1e-3": sum(x <= 1e-3 for x in p), "min_p": min(p),
           "seconds": round(seconds, 1)}
    out["tails"] = {str(t): {"k": (k := sum(x <= t for x in p)), "expected": t * n,
                             "binom_sf": float(sps.binom.sf(k - 1, n, t))} for t in TAILS}
    out["ks_p"] = float(sps.kstest(p, "uniform").pvalue)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--humans", type=int, default=2000)
    ap.add_argument("--prompts", type=int, default=200, help="prompt articles held out (as the evaluation's run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, nargs="+", default=[200, 50], help="longest first (prefix passes re-used)")
    ap.add_argument("--chunk", type=int, default=100, help="texts per progress line")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2")
    runner = Runner(Config(prompts=args.prompts, small=32, humans=args.humans, seed=args.seed, out=""), model, tok)
    free = build_attr_method("HeRo-v3", args.seed)
    aware = build_attr_method("HeRo-v3 (model-aware)", args.seed, model=model,
                              store=cache_root() / f"seed{args.seed}" / "lm-probs")
    out: dict = {"humans": args.humans, "seed": args.seed, "prompts_held_out": args.prompts, "cells": {}}
    for t in args.tokens:
        ids = runner.human_ids(t)
        for name, m in (("model-free", free._decoder), ("model-aware", aware)):
            t0, res = time.time(), []
            for lo in range(0, len(ids), args.chunk):
                res += m.decode_ids(ids[lo : lo + args.chunk])
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
                print(f"{t} tokens {name}: {len(res)}/{len(ids)} texts, {time.time() - t0:.0f} s, "
                      f"max RSS {rss:.1f} GB", flush=True)
            cell = out["cells"][f"{name}@{t}"] = summary(res, time.time() - t0)
            print(f"{t} tokens {name}: released {cell['released']}/{cell['n']}, p <= 1e-3: "
                  f"{cell['watermarked_1e-3']}, smallest p {cell['min_p']:.2e}, KS p {cell['ks_p']:.3g}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
