"""The entropy-gated opening (gpu/opening.py): diversity against plain sampling, and what the mark loses.

Real generation (`generate_watermarked`, SmolLM2-135M, BBC prompts, profile `v3`, fixed keys) at T = 1 and at
top-k 50 / top-p 0.9, for plain sampling and for HeRo with the gate at several thresholds (0 nats = spec v2's
rule alone: the first h tokens fresh).

Diversity (the issue's rows): 20 identical requests (same prompt, same user, fresh randomness per request),
24 new tokens, per prompt: distinct outputs and distinct first-8-token openings; 32 users on one prompt:
distinct 8-token openings. Means over prompts, bootstrap 95 % intervals over prompts.

Cost: the same prompts, payloads and generator seeds with and without the gate (paired), 100 new tokens; an
auditor's model-free decode (levels 1 and 2, token ids as generated) at 50 and 100 tokens: detection
(p <= 1e-3), the public `model` and the exact `user` released; and how many tokens the gate kept fresh.

    python research/opening_diversity.py --json research/results/opening-diversity.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

SETTINGS = {"t1": (1.0, None, None), "provider": (1.0, 50, 0.9)}


def _mean_ci(values) -> dict:
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(0)
    boots = v[rng.integers(0, len(v), size=(2000, len(v)))].mean(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"mean": round(float(v.mean()), 3), "ci95": [round(float(lo), 3), round(float(hi), 3)]}


def _wilson(k: int, n: int) -> list[float]:
    from hero_eval.metrics import wilson

    return [round(x, 3) for x in wilson(k, n)]


def _gen(ctx, prompts, payloads, setting, nats, tokens, seed):
    from verifier.provider.generation import generate_watermarked

    model, tok, profile, keyset = ctx
    t, k, p = SETTINGS[setting]
    g = torch.Generator().manual_seed(seed)
    gens = generate_watermarked(model, tok, prompts, payloads, profile, keyset, max_new_tokens=tokens,
                                min_new_tokens=tokens, temperature=t, top_k=k, top_p=p, generator=g,
                                watermark=nats is not None, opening_nats=nats)
    return [x.token_ids for x in gens]


def diversity(ctx, prompts, variants, setting, repeats, users, user_prompts) -> dict:
    out = {}
    for name, nats in variants.items():
        outs, open8, uopen = [], [], []
        for i, pr in enumerate(prompts):
            ids = _gen(ctx, [pr] * repeats, [{"model": 7, "user": 1234}] * repeats, setting, nats, 24, 1000 + i)
            outs.append(len({tuple(x) for x in ids}))
            open8.append(len({tuple(x[:8]) for x in ids}))
        for i, pr in enumerate(prompts[:user_prompts]):
            ids = _gen(ctx, [pr] * users, [{"model": 7, "user": u} for u in range(users)], setting, nats, 8, 2000 + i)
            uopen.append(len({tuple(x[:8]) for x in ids}))
        out[name] = {"repeats_distinct_outputs": _mean_ci(outs), "repeats_distinct_first8": _mean_ci(open8),
                     "users_distinct_first8": _mean_ci(uopen)}
        print(setting, name, json.dumps(out[name]), flush=True)
    return out


def _spy(orig, kept: list):
    def __call__(self, input_ids, scores):  # HF checks a processor's signature: (input_ids, scores) only
        r = orig(self, input_ids, scores)
        if self.opening is not None:
            kept.append((self.opening.need > 0).clone())
        return r

    return __call__


def cost(ctx, prompts, variants, setting, batch) -> dict:
    from verifier.engine.decoder import Decoder
    from verifier.provider.generation import HeroLogitsProcessor

    _, _, profile, keyset = ctx
    g = torch.Generator().manual_seed(5)
    payloads = [{"model": int(torch.randint(0, 256, (1,), generator=g)),
                 "user": int(torch.randint(0, 4096, (1,), generator=g))} for _ in prompts]
    decoder = Decoder(profile, {lv: [t] for lv, t in enumerate(keyset.tables, start=1)})
    out = {}
    for name, nats in variants.items():
        if nats is None:
            continue
        ids, fresh = [], []
        for s in range(0, len(prompts), batch):
            # count the gate's fresh tokens: wrap the processor's step to read its state after the run
            kept: list = []
            orig = HeroLogitsProcessor.__call__
            HeroLogitsProcessor.__call__ = _spy(orig, kept)
            try:
                ids += _gen(ctx, prompts[s:s + batch], payloads[s:s + batch], setting, nats, 100, 3000 + s)
            finally:
                HeroLogitsProcessor.__call__ = orig
            if kept:  # steps whose row was still gated after the step = fresh tokens past the first
                fresh += (torch.stack(kept).sum(0) + 1).clamp(max=24).tolist()
        cell: dict = {"texts": len(ids), "opening_nats": nats}
        if fresh:
            cell["fresh_tokens_mean"] = round(float(np.mean(fresh)), 2)
            cell["fresh_tokens_p90"] = float(np.percentile(fresh, 90))
        for n in (50, 100):
            res = decoder.decode_ids([x[:n] for x in ids])
            det = sum(r.p_value <= 1e-3 for r in res)
            model_ok = sum(r.levels[0].status == "decoded" and r.levels[0].fields.get("model") == p["model"]
                           for r, p in zip(res, payloads, strict=True))
            user_ok = sum(r.levels[1].status == "decoded" and r.levels[1].fields.get("user") == p["user"]
                          for r, p in zip(res, payloads, strict=True))
            wrong = sum(any(lv.status == "decoded" and lv.fields.get(f) != p[f] for lv, f in
                            zip(r.levels, ("model", "user"), strict=True)) for r, p in zip(res, payloads, strict=True))
            m = len(ids)
            cell[f"detected_{n}"] = [round(det / m, 3), _wilson(det, m)]
            cell[f"model_{n}"] = [round(model_ok / m, 3), _wilson(model_ok, m)]
            cell[f"user_{n}"] = [round(user_ok / m, 3), _wilson(user_ok, m)]
            cell[f"wrong_{n}"] = wrong
        out[name] = cell
        print(setting, name, json.dumps(cell), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS))
    ap.add_argument("--nats", nargs="+", type=float, default=[0.0, 4.0, 8.0, 12.0])
    ap.add_argument("--prompts", type=int, default=12, help="prompts of the repeats experiment")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--user-prompts", type=int, default=6)
    ap.add_argument("--cost-texts", type=int, default=200)
    ap.add_argument("--cost-nats", nargs="+", type=float, default=[0.0, 8.0])
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article
    from verifier.engine.keys import KeySet, derive_level_table
    from verifier.engine.profile import resolve_profile
    from verifier.lm import load_model

    torch.set_num_threads(2)
    profile = resolve_profile("v3")
    model, tok = load_model("smollm2")
    arts, _ = bbc_prompts_and_humans(max(a.prompts, a.cost_texts), 0, seed=11)
    prompts = [prompt_from_article(x.text, tok, 50) for x in arts]
    masters = [bytes([lv]) * 32 for lv in (1, 2)]
    keyset = KeySet(tuple(derive_level_table(m, profile, lv, "v") for lv, m in enumerate(masters, start=1)))
    ctx = (model, tok, profile, keyset)
    variants = {"plain": None, **{f"gate {n:g}": n for n in a.nats}}
    report: dict = {"profile": profile.name, "context_width": profile.context_width, "settings": {}}
    t0 = time.perf_counter()
    for s in a.settings:
        cell = report["settings"][s] = {}
        cell["diversity"] = diversity(ctx, prompts[: a.prompts], variants, s, a.repeats, a.users, a.user_prompts)
        if a.cost_texts:
            cell["cost"] = cost(ctx, prompts[: a.cost_texts], {f"gate {n:g}": n for n in a.cost_nats}, s, a.batch)
    report["wall_s"] = round(time.perf_counter() - t0)
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
