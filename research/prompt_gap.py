"""What the missing prompt costs model-aware scoring: the LM with the generator's own context against the re-run.

Model-aware scoring (spec 16.2) re-runs the LM over the text alone: the verifier never sees the prompt. This
measures what that costs on the evaluation's HeRo-v3 texts (the `hero eval --sections attribution` cache, seed
0, its keys and users), on the generator's token ids (no re-tokenization, so both readings score the same
positions): `text alone` is the product's re-run (temperature 1, no warp); `after <|im_start|>` the same with
the tokenizer's BOS token before the text (does a generic start stand in for the prompt?); `with prompt` is the
generator's exact distribution (its prompt ids before the text; at top-k 50 / top-p 0.9 under that warp, nothing
mixed in): the upper bound a verifier holding the prompt could reach. Exact `user`, detection (p <= 1e-3) and wrong
`user` at 50 / 100 / 200 tokens, under the default union (with its edit readings) and the likelihood ratio.

    python research/prompt_gap.py k50p0.9 T1 --json research/results/prompt-gap.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import edit_readings as er

from hero_eval.attribution import user_value
from verifier.engine import reference
from verifier.engine.model_aware import DeploymentSampling, routing_probabilities, text_logits
from verifier.engine.weighted_decode import LIKELIHOOD_RATIO, WeightedDecoder, Weighting


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("settings", nargs="+", choices=["k50p0.9", "T1"])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    b = er.Bench(None, 16)
    out = {}
    for setting in args.settings:
        recs = er.texts(setting, args.texts)
        users = [user_value(0, r["i"]) for r in recs]
        ids = [r["ids"] for r in recs]
        prompts = [b.tok(r["prompt"], add_special_tokens=False)["input_ids"] for r in recs]
        samp = DeploymentSampling(top_k=50, top_p=0.9, mix=0.0) if setting == "k50p0.9" else DeploymentSampling()
        runs = {}
        bos = b.tok.bos_token_id
        for name, pre in (("text alone", [[] for _ in ids]), (f"after {b.tok.decode([bos])}", [[bos] for _ in ids]),
                          ("with prompt", prompts)):
            probs = []
            rows = [q + x for q, x in zip(pre, ids, strict=True)]
            for x, q, (_, logits) in zip(ids, pre, text_logits(b.model, rows, batch_size=8), strict=True):
                pos = reference.scored_positions(x, b.h)
                t = torch.tensor([len(q) + p - 1 for p in pos], dtype=torch.int64)  # row len(q)+p-1 predicts x[p]
                lg = logits[t].double()
                tokens = torch.tensor([x[p] for p in pos], dtype=torch.int64)
                dist = samp.distribution(lg) if name == "with prompt" else torch.softmax(lg, -1)
                probs.append(routing_probabilities(b.profile, dist, tokens))
            runs[name] = probs
        for n in (50, 100, 200):
            cut = [x[:n] for x in ids]
            for name, probs in runs.items():
                pr = [p[: len(reference.scored_positions(list(c), b.h))] for p, c in zip(probs, cut, strict=True)]
                for stat in ("union", "likelihood-ratio"):
                    if stat == "union":
                        rs = b.decode("1e-4,1e-5", cut, pr)
                    else:
                        rs = WeightedDecoder(b.method._decoder, statistic=LIKELIHOOD_RATIO).decode_ids(
                            cut, [Weighting(LIKELIHOOD_RATIO)(p) for p in pr])
                    got = [b.user(r) for r in rs]
                    res = {"exact": er.cell(sum(g == u for g, u in zip(got, users, strict=True)), len(rs)),
                           "detected": er.cell(sum(r.p_value <= 1e-3 for r in rs), len(rs)),
                           "wrong": sum(g not in (None, u) for g, u in zip(got, users, strict=True))}
                    out[f"{setting} {n} {name} {stat}"] = res
                    print(setting, n, name, stat, res, flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
