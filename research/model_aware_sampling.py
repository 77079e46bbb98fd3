"""Model-aware scoring at the provider setting: does re-creating the deployment's top-k/top-p help, and how far
is the result from the generator's own probabilities (the upper bound)?

Reads the top-k 50 / top-p 0.9 texts `research/public_level_v3.py generate --profile v3 --setting provider`
cached (SmolLM2-135M, BBC prompts, 200 new tokens, profile `v3`, a random `model` and `user` per text), and
decodes each text's first 50 / 100 / 200 tokens with an auditor's keys (levels 1 and 2) under:

- `model-free`: equal weights (the default scoring);
- `linear`: the LM re-run over the text alone at temperature 1, weights min(H(1/p) - 1, 4) on X = -log(1 - U)
  (model-aware scoring of 2026-11-28);
- `likelihood-ratio`: the same re-run, weights min(1/p - 1, 5) on -log U, lower tail (model-aware scoring now);
- `union`: per candidate the best of equal, linear and likelihood-ratio weights, times 3 (spec 16.5);
- `model-free, -log U lower tail`: equal weights on -log U (no model);
- `... k50/p0.9 mix m`: the re-run with the deployment's sampler re-created (`DeploymentSampling`: transformers'
  top-k 50 then top-p 0.9, mixed with the raw distribution at weight m);
- `oracle`: the generator's own warped probabilities (the LM run over prompt + text): what no verifier has,
  the bound the others are read against (only on the ids as generated: the prompt's tokens are known there).

One LM pass per text (and one with the prompt for the oracle) serves every variant. Human BBC texts (first 200
tokens) under the same variants give the false-release count and the calibration (KS) of each statistic.
`--attacks` adds the edited texts at 200 tokens (10 % and 20 % of the tokens replaced at random, as the
evaluation's REP attack) and 50/50 two-user splices (pairs i, i+1): both users named (`mixed`), one, none, or
a third value.
Wilson 95 % intervals; prints one JSON line per cell and writes --json.

    python research/public_level_v3.py generate --profile v3 --setting provider --texts 200 --batch 50
    python research/model_aware_sampling.py --retokenize --humans 300 \
        --json research/results/model-aware-sampling.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edit_readings import named_users
from public_level_v3 import CACHE, _masters, _retokenized

from hero_eval.metrics import wilson
from verifier.engine.decoder import Decoder
from verifier.engine.keys import derive_level_table
from verifier.engine.model_aware import DeploymentSampling, routing_probabilities, scored_logits
from verifier.engine.profile import resolve_profile
from verifier.engine.weighted_decode import LIKELIHOOD_RATIO, LINEAR, UNION, WeightedDecoder, Weighting

LENGTHS = (50, 100, 200)
MIXES = (0.25,)
TOP_K, TOP_P = 50, 0.9


def _cell(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 4) if n else None, "ci95": [round(lo, 3), round(hi, 3)]}


LINEAR_OLD = Weighting(LINEAR, clip=4.0)
LR = Weighting(LIKELIHOOD_RATIO, clip=5.0)
UNION_W = Weighting(UNION)


def _samplings(setting: str) -> dict[str, DeploymentSampling]:
    """The distributions the re-run is read under: T = 1, and (provider texts) the deployment's warp."""
    out = {"T=1": DeploymentSampling()}
    if setting == "provider":
        for m in MIXES:
            out[f"k{TOP_K}/p{TOP_P} mix {m}"] = DeploymentSampling(top_k=TOP_K, top_p=TOP_P, mix=m)
    return out


def _model_free_log_u(texts, n: int, context_width: int) -> list[np.ndarray]:
    """Equal weights on -log U, lower tail: the likelihood-ratio statistic with one p for every token (no model;
    Li et al.'s h_log score). Any constant p gives the same p-values; 0.5 makes every weight 1."""
    from verifier.engine.reference import scored_positions

    return [np.full((len(scored_positions(list(t[:n]), context_width)), 2), 0.5) for t in texts]


def _scorings(probs: dict[str, list]) -> list[tuple[str, list | None, Weighting | None]]:
    """(name, level probabilities, weighting) per scoring compared."""
    out: list[tuple[str, list | None, Weighting | None]] = [("model-free", None, None)]
    if "model-free log U" in probs:
        out.append(("model-free, -log U lower tail", probs["model-free log U"], LR))
    if "T=1" not in probs:
        return out
    out.append(("linear, T=1 (2026-11-28)", probs["T=1"], LINEAR_OLD))
    for name, pr in probs.items():
        if name not in ("oracle", "model-free log U"):
            out.append((f"likelihood-ratio, {name}", pr, LR))
            out.append((f"union, {name}", pr, UNION_W))
    if "oracle" in probs:
        out.append(("linear, oracle (generator's own)", probs["oracle"], LINEAR_OLD))
        out.append(("likelihood-ratio, oracle (generator's own)", probs["oracle"], LR))
    return out


def _probabilities(model, profile, texts, samplings, batch: int) -> dict[str, list[np.ndarray]]:
    """Per sampling, per text, [n_scored, levels] level probabilities, all from one LM pass."""
    out: dict[str, list[np.ndarray]] = {k: [] for k in samplings}
    for text, (pos, logits) in zip(texts, scored_logits(model, texts, profile.context_width, batch_size=batch),
                                   strict=True):
        tokens = torch.tensor([text[p] for p in pos], dtype=torch.int64)
        for name, sampling in samplings.items():
            out[name].append(routing_probabilities(profile, sampling.distribution(logits), tokens))
    return out


def _oracle(model, profile, prompts_ids, texts, batch: int, setting: str) -> list[np.ndarray]:
    """The generator's own (warped) level probabilities: the LM over prompt + text, no mix."""
    from verifier.engine.reference import scored_positions

    warp = setting == "provider"
    sampling = DeploymentSampling(top_k=TOP_K if warp else None, top_p=TOP_P if warp else None, mix=0.0)
    out = []
    for lo in range(0, len(texts), batch):
        rows = [list(p) + list(t) for p, t in zip(prompts_ids[lo:lo + batch], texts[lo:lo + batch], strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for i, text in enumerate(texts[lo:lo + batch]):
            pos = scored_positions(list(text), profile.context_width)
            off = len(prompts_ids[lo + i])
            rows_t = torch.tensor([off + p - 1 for p in pos], dtype=torch.int64)
            tokens = torch.tensor([text[p] for p in pos], dtype=torch.int64)
            out.append(routing_probabilities(profile, sampling.distribution(logits[i, rows_t].double()), tokens))
    return out


def _every_probability(a, model, profile, texts) -> dict[str, list]:
    """What every scoring reads: the LM's (unless --model-free-only) and the model-free -log U row's."""
    probs = {} if a.model_free_only else _probabilities(model, profile, texts, _samplings(a.setting), a.lm_batch)
    probs["model-free log U"] = _model_free_log_u(texts, max(LENGTHS), profile.context_width)
    return probs


def _decode(decoder, texts, probs, n: int, weighting: Weighting | None):
    from verifier.engine.reference import scored_positions

    cut = [list(x[:n]) for x in texts]
    if probs is None:
        return decoder.decode_ids(cut)
    w = [weighting(p[:len(scored_positions(c, decoder.profile.context_width))]) for c, p in zip(cut, probs,
                                                                                                  strict=True)]
    return WeightedDecoder(decoder, statistic=weighting.statistic).decode_ids(cut, w)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--setting", default="provider")
    ap.add_argument("--retokenize", action="store_true", help="decode the texts as a verifier sees them")
    ap.add_argument("--humans", type=int, default=0)
    ap.add_argument("--lm-batch", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0, help="only the first N texts (a quick look)")
    ap.add_argument("--attacks", action="store_true", help="also replaced tokens (10 %%, 20 %%) and 50/50 splices")
    ap.add_argument("--attacks-only", action="store_true", help="only the attacks (no prefixes, no oracle)")
    ap.add_argument("--humans-only", action="store_true", help="only the human texts (with --humans)")
    ap.add_argument("--humans-offset", type=int, default=0, help="skip the first N human texts (a fresh sample)")
    ap.add_argument("--model-free-only", action="store_true",
                    help="only the model-free statistics (no LM pass): equal weights on X and on -log U")
    ap.add_argument("--no-oracle", action="store_true", help="skip the generator's-own-probabilities rows")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    from verifier.lm import load_model

    d = a.cache / f"v3-{a.setting}"
    batches = [torch.load(f, weights_only=False) for f in sorted(d.glob("batch*.pt"))]
    seed = batches[0]["seed"]
    ids = [x for b in batches for x in b["ids"]]
    payloads = [p for b in batches for p in b["payloads"]]
    if a.limit:
        ids, payloads = ids[:a.limit], payloads[:a.limit]
    profile = resolve_profile("v3")
    masters = _masters(seed)
    tables = {lv: [derive_level_table(m, profile, lv, "v")] for lv, m in enumerate(masters, start=1)}
    decoder = Decoder(profile, tables)
    model, tok = load_model("smollm2")
    model.eval()
    texts = _retokenized(ids) if a.retokenize else ids
    report: dict = {"texts": len(texts), "retokenized": a.retokenize, "setting": a.setting, "cells": []}
    if a.humans_only:
        report["humans"] = _humans(a, model, tok, profile, decoder, seed)
        if a.json:
            Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
        return
    if a.attacks_only:
        report["attacks"] = _attacks(a, model, profile, decoder, texts, payloads)
        if a.json:
            Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
        return
    t0 = time.perf_counter()
    probs = _every_probability(a, model, profile, texts)
    if not a.retokenize and not a.model_free_only and not a.no_oracle:
        from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article

        arts, _ = bbc_prompts_and_humans(len(ids), 0, seed=seed)
        prompts = [prompt_from_article(x.text, tok, 50) for x in arts][:len(ids)]
        prompt_ids = tok(prompts, add_special_tokens=False)["input_ids"]
        probs["oracle"] = _oracle(model, profile, prompt_ids, texts, a.lm_batch, a.setting)
    print(f"LM passes: {time.perf_counter() - t0:.0f}s for {len(texts)} texts", file=sys.stderr, flush=True)
    for name, pr, weighting in _scorings(probs):
        cell: dict = {"scoring": name}
        for n in LENGTHS:
            res = _decode(decoder, texts, pr, n, weighting)
            user = [r.levels[1] for r in res]
            exact = sum(lv.status == "decoded" and lv.fields["user"] == p["user"] for lv, p in zip(user, payloads,
                                                                                                   strict=True))
            wrong = sum(lv.status == "decoded" and lv.fields["user"] != p["user"] for lv, p in zip(user, payloads,
                                                                                                   strict=True))
            model_ok = sum(r.levels[0].status == "decoded" and r.levels[0].fields["model"] == p["model"]
                           for r, p in zip(res, payloads, strict=True))
            cell[f"user_{n}"] = _cell(exact, len(res))
            cell[f"wrong_user_{n}"] = wrong
            cell[f"model_{n}"] = _cell(model_ok, len(res))
            cell[f"detected_1e-3_{n}"] = _cell(sum(r.p_value <= 1e-3 for r in res), len(res))
        report["cells"].append(cell)
        print(json.dumps(cell), flush=True)
    if a.attacks:
        report["attacks"] = _attacks(a, model, profile, decoder, texts, payloads)
    if a.humans:
        report["humans"] = _humans(a, model, tok, profile, decoder, seed)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


def _attacks(a, model, profile, decoder, texts, payloads) -> list[dict]:
    """Exact `user` on 200-token texts with 10 % / 20 % replaced tokens; 50/50 splices: both / one / none / third."""
    import random

    from hero_eval.attacks import replace
    from hero_eval.splices import build_splices, classify

    users = [p["user"] for p in payloads]
    rng = random.Random(0)
    sets = {f"REP {int(q * 100)}%": ([replace(list(x[:200]), q, profile.vocab_size, rng) for x in texts], users)
            for q in (0.1, 0.2)}
    splices, _ = build_splices([x[:200] for x in texts], users, 0.5, 200)
    sets["splice 50/50"] = ([list(sp.ids) for sp in splices], [sp.users for sp in splices])
    out = []
    for attack, (batch, truth) in sets.items():
        probs = _every_probability(a, model, profile, batch)
        for name, pr, weighting in _scorings(probs):
            res = _decode(decoder, batch, pr, 200, weighting)
            row: dict = {"attack": attack, "scoring": name}
            if attack.startswith("REP"):
                exact = sum(r.levels[1].status == "decoded" and r.levels[1].fields["user"] == u
                            for r, u in zip(res, truth, strict=True))
                wrong = sum(bool(named_users(r.levels[1]) - {u}) for r, u in zip(res, truth, strict=True))
                row.update(user=_cell(exact, len(res)), wrong=wrong)
            else:
                kinds = [classify(named_users(r.levels[1]), pair, r.levels[1].status) for r, pair in zip(res, truth,
                                                                                                   strict=True)]
                row.update({k: _cell(kinds.count(k), len(kinds)) for k in ("both", "one", "none")},
                           third=kinds.count("third"))
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def _humans(a, model, tok, profile, decoder, seed) -> list[dict]:
    from hero_eval.corpus import bbc_prompts_and_humans

    _, arts = bbc_prompts_and_humans(0, a.humans_offset + a.humans, seed=seed)
    arts = arts[a.humans_offset:]
    texts = [x[:200] for x in tok([x.text for x in arts], add_special_tokens=False)["input_ids"]]
    probs = _every_probability(a, model, profile, texts)
    out = []
    for name, pr, weighting in _scorings(probs):
        res = _decode(decoder, texts, pr, 200, weighting)
        pv = [r.p_value for r in res]
        user_p = [10 ** r.levels[1].log10_p_value for r in res]
        released = sum(any(lv.status in ("decoded", "mixed") for lv in r.levels) for r in res)
        row = {"scoring": name, "texts": len(res), "released": released,
               "p<=1e-3": sum(p <= 1e-3 for p in pv),
               "ks_text_p": round(float(sps.kstest(pv, "uniform").pvalue), 4),
               "ks_user_p": round(float(sps.kstest(user_p, "uniform").pvalue), 4)}
        out.append(row)
        print(json.dumps({"humans": row}), flush=True)
    return out


if __name__ == "__main__":
    main()
