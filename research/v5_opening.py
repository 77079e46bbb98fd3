"""What spec v5's gated opening (docs/spec.md 12.1) costs on 50-token chat answers, and what a shorter one buys.

SmolLM2-135M-Instruct answers the 40 held-out chat requests (evaluation/hero_eval/chat_prompts.py, never used to tune
anything) under its chat template at top-k 50 / top-p 0.9, T = 1, 50 tokens, with profile v5 at opening thresholds
`--nats` (0 = no opening: every token from the h-th on is marked). Per threshold: moderator detection at p <= 1e-3
and the exact `model` (level-1 keys, model-free, issued search), the answers' mean entropy per token, and the
distinct outputs of 20 identical requests (same prompt, payload and keys) on `--div-prompts` prompts: the opening is
what keeps identical requests from sharing their answers (12.1's guarantee), so a shorter one is only worth taking
if that count stays 20.

    OMP_NUM_THREADS=1 python research/v5_opening.py --nats 0 2 4 8 --json research/results/spec-v5-opening.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from transformers import LogitsProcessorList

from hero_eval.chat import chat_template
from hero_eval.chat_prompts import chat_prompts
from hero_eval.methods import HeroMethod
from hero_eval.metrics import proportion
from verifier.engine.decoder import Decoder
from verifier.engine.profile import resolve_profile
from verifier.engine.warpers import make_warpers
from verifier.lm import load_model
from verifier.provider.generation import HeroLogitsProcessor


class Entropy:
    """Mean entropy (nats) of the warped distributions the rows sample from."""

    def __init__(self, warpers: LogitsProcessorList) -> None:
        self.warpers, self.rows = warpers, []

    def __call__(self, input_ids, scores):
        p = torch.softmax(self.warpers(input_ids, scores.clone()).double(), -1)
        self.rows.append(-(p * torch.log(p.clamp_min(1e-300))).sum(-1))
        return scores


def generate(model, tok, prof, keyset, prompts, payloads, nats: float, tokens: int, seed: int):
    warpers = make_warpers(1.0, 50, 0.9)
    g = torch.Generator().manual_seed(seed)
    proc = HeroLogitsProcessor(prof, keyset, payloads, warpers, generator=g, opening_nats=nats)
    ent = Entropy(warpers)
    enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                             logits_processor=LogitsProcessorList([ent, proc]), pad_token_id=tok.pad_token_id,
                             top_k=None, top_p=None, temperature=None)
    new = out[:, enc["input_ids"].shape[1]:].tolist()
    return new, float(torch.stack(ent.rows).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nats", type=float, nargs="+", default=[0.0, 2.0, 4.0, 8.0])
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--div-prompts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load_model("smollm2")
    tok.padding_side = "left"
    prof = resolve_profile("v5")
    keyset = HeroMethod.from_profile("HeRo-v5-opening", prof, args.seed).keyset
    reqs = chat_prompts("heldout")
    prompts = chat_template(tok, [r.prompt for r in reqs])
    rng = random.Random(args.seed)
    issued = list(prof.levels[0].issued)
    payloads = [{"model": rng.choice(issued), "user": rng.randrange(4096)} for _ in prompts]
    mod = Decoder(prof, {1: [keyset.tables[0]]})
    out: dict = {"command": "python research/v5_opening.py " + " ".join(__import__("sys").argv[1:]),
                 "prompts": len(prompts), "tokens": args.tokens, "cells": {}}
    for nats in args.nats:
        t0 = time.time()
        ids, entropy = generate(model, tok, prof, keyset, prompts, payloads, nats, args.tokens, args.seed)
        texts = [tok.decode(x, skip_special_tokens=True) for x in ids]
        res = mod.decode_ids([tok(t, add_special_tokens=False)["input_ids"] for t in texts])
        det = sum(r.levels[0].p_value <= 1e-3 for r in res)
        exact = sum(r.levels[0].fields == {"model": p["model"]} for r, p in zip(res, payloads, strict=True))
        distinct = []
        for k in range(args.div_prompts):
            same, _ = generate(model, tok, prof, keyset, [prompts[k]] * 20, [payloads[k]] * 20, nats, args.tokens,
                               args.seed + 1 + k)
            distinct.append(len({tuple(x) for x in same}))
        cell = {"detected_50": proportion(det, len(res)), "model_exact_50": proportion(exact, len(res)),
                "entropy": entropy, "median_log10_p": float(np.median([r.levels[0].log10_p_value for r in res])),
                "distinct_of_20": distinct, "seconds": round(time.time() - t0, 1)}
        out["cells"][str(nats)] = cell
        print(nats, json.dumps(cell), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
