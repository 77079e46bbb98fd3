"""Spec v5's extra chat rows, on the texts `hero eval --sections chat` generated (its cache), beside v4 and SynthID.

What the chat section does not compute itself (docs/evaluation/chat.md, "Spec v5"): excerpts from token 60, 10 %
random token edits, the issued search (N = 4) against every value (N = 256) on the same texts and keys, the
wrong-key p-value distribution on watermarked texts, `inconsistent-levels` on genuine answers, and SynthID-Text's
weighted-mean score (the SynthID paper's detector without training: layer weights linspace(10, 1, depth)) beside its
binomial test. Keys are the evaluation's (derived from its seed and each method's name), so every row reads the
same texts the report's rows read. Wilson 95 % intervals; the texts' mean entropy per token beside each profile.

    python research/v5_chat_rows.py --cache $HERO_HOME/eval-cache/seed0/chat-chat --profiles v5 v5-f35 v5-u55 v4 \
        --profiles-dir research/profiles --humans 2000 --json research/results/spec-v5-chat-rows.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats as sps

from hero_eval import attacks, metrics
from hero_eval.attribution import hero_model_value, user_value
from hero_eval.methods import VOCAB, HeroMethod
from verifier.engine.decoder import Decoder
from verifier.engine.profile import resolve_profile

ALPHA_DETECT = 1e-3
WRONG_KEYS = 5


def load(cache: Path, stem: str) -> list[dict]:
    files = [f for f in cache.glob(f"{stem}_*_200t_*k50p0.9.jsonl") if "users0" not in f.name and "div" not in f.name]
    if not files:
        return []
    recs = {}
    for line in files[0].read_text().splitlines():
        r = json.loads(line)
        recs[r["i"]] = r
    return [recs[i] for i in sorted(recs)]


def share(k: int, n: int) -> dict:
    return metrics.proportion(k, n)


def level_of(res, field: str):
    for lv in res.levels:
        if lv.fields is not None and field in lv.fields:
            return lv
    return None


def hero_rows(name: str, recs: list[dict], tok, seed: int, humans50: list[list[int]]) -> dict:
    prof = resolve_profile(name)
    m = HeroMethod.from_profile(f"HeRo-{name}", prof, seed)
    t1, t2 = m.keyset.tables[0], m.keyset.tables[1]
    model = hero_model_value(prof, seed)
    users = [user_value(seed, r["i"]) for r in recs]

    def retok(ids_list):
        return [tok(tok.decode(x, skip_special_tokens=True), add_special_tokens=False)["input_ids"] for x in ids_list]

    def detect(dec, ids):
        return sum(r.levels[0].p_value <= ALPHA_DETECT for r in dec.decode_ids(ids))

    mod = Decoder(prof, {1: [t1]})
    aud = Decoder(prof, {1: [t1], 2: [t2]})
    n = len(recs)
    out: dict = {"texts": n, "entropy": float(np.mean([r["entropy"] for r in recs])),
                 "ppl_median": float(np.median([r["gen_ppl"] for r in recs]))}
    cut = {t: retok([r["ids"][:t] for r in recs]) for t in (50, 100, 200)}
    out["detected_50"] = share(detect(mod, cut[50]), n)
    res = {t: aud.decode_ids(cut[t]) for t in (50, 100, 200)}
    out["model_exact"] = {t: share(sum(r.levels[0].fields == {"model": model} for r in res[t]), n) for t in res}
    out["user_exact"] = {t: share(sum(r.levels[1].fields == {"user": u} for r, u in zip(res[t], users, strict=True)),
                                  n) for t in res}
    wrong = sum(r.levels[1].fields not in ({"user": u}, {"user": None}) or r.levels[0].fields not in (
        {"model": model}, {"model": None}) for t in res for r, u in zip(res[t], users, strict=True))
    out["wrong_values"] = {"wrong": wrong, "decodes": 3 * n}
    out["inconsistent_levels"] = {t: share(sum("inconsistent-levels" in r.flags for r in res[t]), n) for t in res}
    # excerpts: the answer from token 60 on (a quote that does not start where the answer did)
    ex = retok([r["ids"][60:110] for r in recs])
    out["excerpt60_detected_50"] = share(detect(mod, ex), n)
    ex_all = aud.decode_ids(retok([r["ids"][60:] for r in recs]))
    out["excerpt60_user_exact_140"] = share(sum(r.levels[1].fields == {"user": u}
                                                for r, u in zip(ex_all, users, strict=True)), n)
    # 10 % of tokens replaced by random ones
    ed = [attacks.replace(r["ids"], 0.1, VOCAB, random.Random(f"{seed}/REP/0.1/{r['i']}")) for r in recs]
    out["edit10_detected_50"] = share(detect(mod, retok([x[:50] for x in ed])), n)
    ed_res = aud.decode_ids(retok(ed))
    out["edit10_user_exact_200"] = share(sum(r.levels[1].fields == {"user": u}
                                             for r, u in zip(ed_res, users, strict=True)), n)
    # the issued search against every value, same texts and keys
    if prof.levels[0].issued is not None:
        open_prof = replace(prof, levels=(replace(prof.levels[0], issued=None), *prof.levels[1:]))
        om = Decoder(open_prof, {1: [t1]})
        out["open256_detected_50"] = share(detect(om, cut[50]), n)
        out["open256_model_exact"] = {t: share(sum(r.levels[0].fields == {"model": model}
                                                   for r in om.decode_ids(cut[t])), n) for t in (50, 100, 200)}
    # wrong keys on watermarked texts: p-values of both levels under other key sets
    wp = {1: [], 2: []}
    for k in range(WRONG_KEYS):
        wm = HeroMethod.from_profile(f"HeRo-{name}-wrong{k}", prof, seed)
        for r in Decoder(prof, {1: [wm.keyset.tables[0]], 2: [wm.keyset.tables[1]]}).decode_ids(cut[200]):
            wp[1].append(r.levels[0].p_value)
            wp[2].append(r.levels[1].p_value)
    out["wrong_keys"] = {str(lv): {"n": len(p), "le_1e-3": int(np.sum(np.array(p) <= 1e-3)),
                                   "le_0.01": int(np.sum(np.array(p) <= 0.01)),
                                   "ks_two_sided": float(sps.kstest(p, "uniform").pvalue),
                                   "ks_too_many_small": float(sps.kstest(p, "uniform", alternative="greater").pvalue)}
                         for lv, p in wp.items()}
    if humans50:
        hp = np.array([r.levels[0].p_value for r in mod.decode_ids(humans50)])
        out["humans_50"] = {"n": len(hp), "le_1e-3": int((hp <= 1e-3).sum()),
                            "ks_two_sided": float(sps.kstest(hp, "uniform").pvalue)}
    return out


def synthid_rows(recs: list[dict], tok, seed: int, humans: dict[int, list[list[int]]]) -> dict:
    """Binomial test and the weighted-mean score (z-test on its null mean and variance, and TPR at the humans'
    1e-3 threshold) at 50 / 100 / 200 tokens."""
    import torch

    from hero_eval.baselines.synthid import SynthIDDetector, synthid_keys

    det = SynthIDDetector(synthid_keys(seed), eos_token_id=tok.eos_token_id)
    proc = det.proc
    w = torch.linspace(10, 1, det.depth, dtype=torch.float64)
    p0 = det.p0

    def scores(x: list[int]) -> tuple[float, float]:
        nl = proc.ngram_len
        if len(x) < nl:
            return 0.0, 1.0
        t = torch.tensor([x], dtype=torch.int64)
        keys = proc.compute_ngram_keys(t.unfold(1, nl, 1))
        g = proc.sample_g_values(keys)[0].double()
        keep = torch.tensor(det.mask(x, (keys[0, :, 0] % proc.sampling_table.shape[0]).tolist()), dtype=torch.bool)
        k = int(keep.sum())
        if not k:
            return 0.0, 1.0
        s = float((g[keep] * w).sum())
        mean, var = k * p0 * float(w.sum()), k * p0 * (1 - p0) * float((w * w).sum())
        z = (s - mean) / math.sqrt(var)
        return z, float(sps.norm.sf(z))

    n = len(recs)
    out: dict = {"texts": n, "entropy": float(np.mean([r["entropy"] for r in recs])),
                 "ppl_median": float(np.median([r["gen_ppl"] for r in recs])),
                 "weights": "linspace(10, 1, depth)", "p0": p0}
    for t in (50, 100, 200):
        ids = [tok(tok.decode(r["ids"][:t], skip_special_tokens=True), add_special_tokens=False)["input_ids"]
               for r in recs]
        bino = [s.p_value for s in det.score(ids)]
        wm = [scores(x) for x in ids]
        cell = {"binomial_detected": share(sum(p <= ALPHA_DETECT for p in bino), n),
                "weighted_mean_detected": share(sum(p <= ALPHA_DETECT for _, p in wm), n)}
        if t in humans:
            hz = sorted((scores(x)[0] for x in humans[t]), reverse=True)
            thr = hz[max(0, int(len(hz) * 1e-3) - 1)] if hz else math.inf
            cell["weighted_mean_tpr_at_fpr_1e-3"] = share(sum(z > thr for z, _ in wm), n)
            hp = [scores(x)[1] for x in humans[t]]
            cell["weighted_mean_humans_le_1e-3"] = {"n": len(hp), "k": int(sum(p <= 1e-3 for p in hp))}
        out[str(t)] = cell
    return out


def human_ids(tok, n: int, seed: int, tokens: int) -> list[list[int]]:
    from hero_eval.corpus import bbc_prompts_and_humans

    _, humans = bbc_prompts_and_humans(1, n, seed)
    out = []
    for a in humans:
        ids = tok(a.body or a.text, add_special_tokens=False)["input_ids"][:tokens]
        out.append(tok(tok.decode(ids, skip_special_tokens=True), add_special_tokens=False)["input_ids"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--profiles", nargs="+", default=["v5", "v4"])
    ap.add_argument("--profiles-dir", default=None, help="HERO_PROFILES_DIR for research profiles")
    ap.add_argument("--humans", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    if args.profiles_dir:
        os.environ["HERO_PROFILES_DIR"] = str(Path(args.profiles_dir).resolve())
    from verifier.lm import load_tokenizer

    tok = load_tokenizer("smollm2")
    humans = {t: human_ids(tok, args.humans, args.seed, t) for t in (50, 100, 200)} if args.humans else {}
    out: dict = {"command": "python research/v5_chat_rows.py " + " ".join(os.sys.argv[1:]), "cells": {}}
    for name in args.profiles:
        recs = load(args.cache, f"HeRo-{name}")
        if recs:
            print(f"HeRo-{name}: {len(recs)} texts", flush=True)
            out["cells"][f"HeRo-{name}"] = hero_rows(name, recs, tok, args.seed, humans.get(50, []))
    recs = load(args.cache, "SynthID-Text")
    if recs:
        print(f"SynthID-Text: {len(recs)} texts", flush=True)
        out["cells"]["SynthID-Text"] = synthid_rows(recs, tok, args.seed, humans)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
