"""One evaluation cell on a second model family: Gemma-3-270M (V = 262,144) with spec v4, BBC continuations.

The shipped Gemma-3-270M is the base model (no chat template), so its cell is the evaluation's second corpus: BBC
article openings continued at top-k 50 / top-p 0.9, T = 1, `--tokens` new tokens forced, texts re-tokenised as a
verifier receives them. A `v4` profile on Gemma's tokenizer (K_1 = 80 contiguous, issued model ids 0-3), keys
derived from the seed as the evaluation derives them, one `model` and a random 12-bit `user` per text. Read:
moderator detection (level-1 keys only, p <= 1e-3), the public `model` and the exact `user` (model-free auditor) at
50 / 100 / `--tokens` tokens, wrong values, and the same moderator test on as many human texts. SynthID-Text
(transformers' processor, its top-k form; evaluation/hero_eval/baselines/synthid.py) continues the same openings in
the same run, `<bos>` first as for HeRo, detected by its binomial test at the same cuts and on the same human texts
(`--no-synthid` skips it).

    python research/gemma_cell.py --texts 100 --tokens 150 --json research/results/gemma-cell.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from hero_eval.corpus import bbc_prompts_and_humans
from hero_eval.generation import generate_rows
from hero_eval.methods import HeroMethod, SynthIDMethod, _decode_safe
from hero_eval.metrics import proportion
from hero_eval.sampling import PROVIDER
from verifier.engine.decoder import Decoder
from verifier.engine.profile import PROFILES_DIR, load_profile, profile_from_dict
from verifier.lm import load_model
from verifier.provider.generation import generate_watermarked


def fields(result, level: int) -> dict:
    out: dict = {}
    for lv in result.levels[:level]:
        out.update(getattr(lv, "fields", None) or {})
    return out


def entropy_ppl(model, tok, prompt: str, token_ids: list[int]) -> tuple[float, float]:
    """The generator's raw (T = 1, unwarped) mean entropy in nats/token and perplexity over one continuation."""
    with torch.no_grad():
        pre = tok(prompt, return_tensors="pt")["input_ids"]  # `<bos>` added, as generation had it
        ids = torch.cat([pre, torch.tensor([token_ids])], dim=1)
        logp = torch.log_softmax(model(ids).logits[0, pre.shape[1] - 1:-1].float(), -1)
    return (float(-(logp.exp() * logp).sum(-1).mean()),
            float(torch.exp(-logp.gather(1, torch.tensor(token_ids)[:, None]).mean())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--no-synthid", action="store_true", help="skip SynthID-Text on the same openings")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = load_profile(PROFILES_DIR / "v4.yaml").to_dict()
    data.update(name="gemma-v4", tokenizer="gemma3-270m", vocab_size=262144)
    profile = profile_from_dict(data)
    method = HeroMethod.from_profile("HeRo-gemma-v4", profile, args.seed)
    model, tok = load_model("gemma3-270m")
    prompts_art, humans_art = bbc_prompts_and_humans(args.texts, args.texts, seed=args.seed)
    prompts = [" ".join(a.text.split()[:40]) for a in prompts_art]
    rng = random.Random(f"gemma-cell/{args.seed}")
    model_id = profile.levels[0].issued[1]
    users = [rng.getrandbits(12) for _ in prompts]
    gens = generate_watermarked(model, tok, prompts, [{"model": model_id, "user": u} for u in users], profile,
                                method.keyset, max_new_tokens=args.tokens, min_new_tokens=args.tokens, top_k=50,
                                top_p=0.9, generator=torch.Generator().manual_seed(args.seed))
    texts = [g.text for g in gens]
    ent, ppl = zip(*(entropy_ppl(model, tok, g.prompt, g.token_ids) for g in gens), strict=True)
    moderator = Decoder(profile, {1: [method.keyset.tables[0]]})
    auditor = Decoder(profile, {lv + 1: [t] for lv, t in enumerate(method.keyset.tables)})
    out: dict = {"model": "gemma3-270m (base, GGUF Q4_K_M -> float32)", "profile": "v4 on gemma3-270m",
                 "texts": len(texts), "sampling": "T = 1, top-k 50, top-p 0.9", "cells": {},
                 "raw_entropy_nats_mean": sum(ent) / len(ent), "perplexity_median": sorted(ppl)[len(ppl) // 2]}
    print(f"raw entropy {out['raw_entropy_nats_mean']:.2f} nats/token, median PPL {out['perplexity_median']:.2f}")
    humans = [tok(" ".join(a.text.split()[:400]), add_special_tokens=False)["input_ids"] for a in humans_art]
    for cut in sorted({50, 100, args.tokens}):
        ids = [tok(t, add_special_tokens=False)["input_ids"][:cut] for t in texts]
        mod = _decode_safe(moderator, ids)
        aud = _decode_safe(auditor, ids)
        hum = _decode_safe(moderator, [h[:cut] for h in humans])
        det = [r is not None and r.log10_p_value <= -3 for r in mod]
        model_ok = [r is not None and fields(r, 1).get("model") == model_id for r in mod]
        model_bad = [r is not None and fields(r, 1).get("model") not in (None, model_id) for r in mod]
        named = [None if r is None else fields(r, 2).get("user") for r in aud]
        user_ok = [n == u for n, u in zip(named, users, strict=True)]
        user_bad = [n not in (None, u) for n, u in zip(named, users, strict=True)]
        hum_det = [r is not None and r.log10_p_value <= -3 for r in hum]
        out["cells"][str(cut)] = {
            "moderator_detected_p_le_1e-3": proportion(sum(det), len(det)),
            "model_exact": proportion(sum(model_ok), len(det)), "model_wrong": int(sum(model_bad)),
            "user_exact_model_free": proportion(sum(user_ok), len(det)), "user_wrong": int(sum(user_bad)),
            "humans_p_le_1e-3": proportion(sum(hum_det), len(hum_det)),
        }
        print(cut, json.dumps(out["cells"][str(cut)]))
    if not args.no_synthid:
        out["synthid"] = synthid_cells(model, tok, prompts, humans, args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


def synthid_cells(model, tok, prompts: list[str], humans: list[list[int]], args) -> dict:
    """SynthID-Text on the same openings at the same sampling: detection at p <= 1e-3 per cut, the same human texts,
    and its texts' raw entropy and PPL measured as HeRo's are."""
    synthid = SynthIDMethod("SynthID-Text", args.seed, eos_token_id=tok.eos_token_id)
    new, _, _ = generate_rows(model, tok, synthid, [tok.bos_token + p for p in prompts], [[] for _ in prompts],
                              args.tokens, args.seed, PROVIDER)
    texts = tok.batch_decode(new, skip_special_tokens=True)
    ent, ppl = zip(*(entropy_ppl(model, tok, p, row.tolist()) for p, row in zip(prompts, new, strict=True)),
                   strict=True)
    out: dict = {"raw_entropy_nats_mean": sum(ent) / len(ent), "perplexity_median": sorted(ppl)[len(ppl) // 2],
                 "cells": {}}
    print(f"SynthID raw entropy {out['raw_entropy_nats_mean']:.2f} nats/token, "
          f"median PPL {out['perplexity_median']:.2f}")
    for cut in sorted({50, 100, args.tokens}):
        ids = [tok(t, add_special_tokens=False)["input_ids"][:cut] for t in texts]
        det = [d.score >= 3 for d in synthid.decode(ids)]
        hum = [d.score >= 3 for d in synthid.decode([h[:cut] for h in humans])]
        out["cells"][str(cut)] = {"detected_p_le_1e-3": proportion(sum(det), len(det)),
                                  "humans_p_le_1e-3": proportion(sum(hum), len(hum))}
        print("SynthID", cut, json.dumps(out["cells"][str(cut)]))
    return out


if __name__ == "__main__":
    main()
