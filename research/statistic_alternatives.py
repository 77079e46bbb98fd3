"""Is the top-k / top-p gap the score? HeRo's statistics against their alternatives on the evaluation's texts.

Issue 32's misses at top-k 50 / top-p 0.9 were read as the information the text holds, not the score. This
measures the alternatives on the same HeRo-v3 texts (the `hero eval --sections attribution` cache, seed 0,
the evaluation's keys), the same attacks and the same users:

- **model-free** (no LM; what a moderator and the default auditor run): HeRo's `ars` sum of
  X = -log(1 - U) (upper tail) against `log`, the sum of Y = -log U read in its lower tail (Li, Ruan, Wang,
  Long, Su 2024's h_log; the likelihood ratio with equal weights), and `ars+log`, their union (factor 2).
  Exact `user` (auditor keys), detection (p <= 1e-3), the public `model` released to a moderator (level-1
  keys only), on 25-200 verbatim tokens and on 200 tokens with 10 % / 20 % replaced; 2,000 human texts.
- **model-aware** (the LM re-run, spec 16): the default union (equal / linear / likelihood-ratio parts, each
  read on all tokens and once per edit floor 1e-4, 1e-5: 9 readings) against subsets of its parts and
  readings (`WeightedDecoder(union_parts=...)`): does a smaller union factor buy verbatim power, and what does
  it cost on edits (uniform and plausible substitutes) and 50/50 splices; 200 human texts.

    python research/statistic_alternatives.py --texts 200 --probs-cache /tmp/edit-probs \\
        --json research/results/statistic-alternatives.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edit_readings import Bench, cell, named_users, texts

from hero_eval.attribution import model_truth, user_value
from hero_eval.corpus import bbc_prompts_and_humans
from hero_eval.splices import build_splices, classify
from verifier.engine.decoder import Decoder, DecodeResult
from verifier.engine.reference import scored_positions
from verifier.engine.weighted_decode import LIKELIHOOD_RATIO, LINEAR, UNION, UNION_PARTS, WeightedDecoder

FREE = ("ars", "log", "ars+log")
# model-aware: (parts of UNION_PARTS kept, reading groups kept: 0 = all tokens, 1 = floor 1e-4, 2 = floor 1e-5)
AWARE = {
    "default (9 readings)": ((0, 1, 2), (0, 1, 2)),
    "likelihood-ratio alone": ((2,), (0,)),
    "likelihood-ratio + floors (3)": ((2,), (0, 1, 2)),
    "equal + likelihood-ratio + floors (6)": ((0, 2), (0, 1, 2)),
    "linear + likelihood-ratio + floors (6)": ((1, 2), (0, 1, 2)),
    "three parts, no floors (3)": ((0, 1, 2), (0,)),
}
FLOORS = "1e-4,1e-5"  # the default edit floors: the 9 readings every subset is cut from
CHUNK = 200  # texts per decode call


def free_decode(decoder: Decoder, name: str, ids: list[list[int]], h: int) -> list[DecodeResult]:
    n = [len(scored_positions(x, h)) for x in ids]
    levels = len(decoder.tables)
    if name == "ars":  # equal weights on X: model-free decoding exactly (tests/engine/test_weighted_stats.py)
        return WeightedDecoder(decoder, statistic=LINEAR).decode_ids(ids, [np.ones((k, levels)) for k in n])
    if name == "log":
        return WeightedDecoder(decoder, statistic=LIKELIHOOD_RATIO).decode_ids(ids, [np.ones((k, levels)) for k in n])
    return WeightedDecoder(decoder, statistic=UNION, union_parts=(LINEAR, LIKELIHOOD_RATIO)).decode_ids(
        ids, [np.ones((2, k, levels)) for k in n])


def aware_decode(b: Bench, name: str, ids: list[list[int]], probs: list[np.ndarray]) -> list[DecodeResult]:
    parts, groups = AWARE[name]
    k = len(UNION_PARTS)
    rows = [g * k + q for g in groups for q in parts]
    weights = [b.weights(FLOORS, p, x)[rows] for p, x in zip(probs, ids, strict=True)]
    return WeightedDecoder(b.method._decoder, statistic=UNION,
                           union_parts=tuple(UNION_PARTS[q] for q in parts)).decode_ids(ids, weights)


def cut(ids: list[list[int]], probs: list[np.ndarray] | None, n: int, h: int):
    ids = [x[:n] for x in ids]
    if probs is None:
        return ids, None
    return ids, [p[: len(scored_positions(x, h))] for p, x in zip(probs, ids, strict=True)]


def user_cell(b: Bench, rs: list[DecodeResult], users: list[int]) -> dict:
    got = [b.user(r) for r in rs]
    return {"exact": cell(sum(g == u for g, u in zip(got, users, strict=True)), len(rs)),
            "wrong": sum(g not in (None, u) for g, u in zip(got, users, strict=True)),
            "detected": cell(sum(r.p_value <= 1e-3 for r in rs), len(rs))}


def model_free(b: Bench, setting: str, n_texts: int) -> dict:
    recs = texts(setting, n_texts)
    users = [user_value(0, r["i"]) for r in recs]
    aud = b.method._decoder
    mod = Decoder(aud.profile, {1: aud.tables[1]}, alpha=aud.alpha)  # a moderator: level-1 keys only
    model = model_truth(b.method, 0)
    out = {}
    verbatim = b.seen(b.attacked(recs, 0.0, None))
    for name, frac, length in (("v25", 0, 25), ("v50", 0, 50), ("v100", 0, 100), ("v200", 0, 200),
                               ("rep10", 0.1, 200), ("rep20", 0.2, 200)):
        ids, _ = cut(b.seen(b.attacked(recs, frac, "REP")) if frac else verbatim, None, length, b.h)
        for v in FREE:
            res = user_cell(b, free_decode(aud, v, ids, b.h), users)
            ms = free_decode(mod, v, ids, b.h)
            res["model_exact"] = cell(sum(r.levels[0].status == "decoded" and r.levels[0].fields["model"] == model
                                          for r in ms), len(ms))
            res["model_wrong"] = sum(r.levels[0].status == "decoded" and r.levels[0].fields["model"] != model
                                     for r in ms)
            out[f"{name} {v}"] = res
            print(f"model-free {setting} {name} {v}: user {res['exact']['k']} detected {res['detected']['k']} "
                  f"model {res['model_exact']['k']} /{len(ids)}; wrong {res['wrong']}+{res['model_wrong']}", flush=True)
    return out


def model_aware(b: Bench, setting: str, n_texts: int) -> dict:
    recs = texts(setting, n_texts)
    users = [user_value(0, r["i"]) for r in recs]
    out = {}
    sp, _ = build_splices([r["ids"] for r in recs], users, 0.5, 200)
    kinds = (("v50", 0, None, 50), ("v100", 0, None, 100), ("v200", 0, None, 200), ("rep10", 0.1, "REP", 200),
             ("rep20", 0.2, "REP", 200), ("sub10", 0.1, "SUB", 200), ("splice50", 0, "SPLICE", 200))
    for name, frac, kind, length in kinds:
        if kind == "SPLICE":
            raw, key = b.seen([list(s.ids) for s in sp]), f"{setting}_splice50_{n_texts}"
        else:
            tag = "verbatim" if kind is None else name
            raw, key = b.seen(b.attacked(recs, frac, kind)), f"{setting}_{tag}_{n_texts}"
        ids, probs = cut(raw, b.probs(key, raw), length, b.h)
        for v in AWARE:
            rs = aware_decode(b, v, ids, probs)
            if kind == "SPLICE":
                counts = [classify(named_users(r.levels[b.level - 1]), s.users, r.levels[b.level - 1].status)
                          for r, s in zip(rs, sp, strict=True)]
                res = {k: cell(counts.count(k), len(rs)) for k in ("both", "one", "none", "third")}
                line = f"both {res['both']['k']} one {res['one']['k']} third {res['third']['k']}"
            else:
                res = user_cell(b, rs, users)
                line = f"user {res['exact']['k']} detected {res['detected']['k']} wrong {res['wrong']}"
            out[f"{name} {v}"] = res
            print(f"model-aware {setting} {name} {v}: {line} /{len(rs)}", flush=True)
    return out


def humans(b: Bench, n_free: int, n_aware: int) -> dict:
    _, hs = bbc_prompts_and_humans(1, max(n_free, n_aware), 0)
    raw = b.seen([b.tok(a.body or a.text, add_special_tokens=False)["input_ids"][:200] for a in hs])
    out = {}
    for length in (50, 200):
        ids, _ = cut(raw[:n_free], None, length, b.h)
        for v in FREE:  # in chunks: one batch of 2,000 texts holds every candidate's evidence (over 10 GB)
            rs = [r for lo in range(0, len(ids), CHUNK)
                  for r in free_decode(b.method._decoder, v, ids[lo : lo + CHUNK], b.h)]
            ps = np.array([r.p_value for r in rs])
            out[f"model-free {length} {v}"] = {
                "released": cell(sum(any(lv.status in ("decoded", "mixed") for lv in r.levels) for r in rs), len(rs)),
                "p<=1e-3": int((ps <= 1e-3).sum()), "ks_p": float(sps.kstest(ps, "uniform").pvalue)}
        a_ids = raw[:n_aware]
        ids, probs = cut(a_ids, b.probs(f"humans_{n_aware}", a_ids), length, b.h) if n_aware else ([], [])
        for v in AWARE if n_aware else ():
            rs = aware_decode(b, v, ids, probs)
            out[f"model-aware {length} {v}"] = {
                "released": cell(sum(any(lv.status in ("decoded", "mixed") for lv in r.levels) for r in rs), len(rs)),
                "min_p": min(r.p_value for r in rs)}
    for k, v in out.items():
        print("humans", k, v, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--settings", nargs="+", default=["k50p0.9", "T1"], choices=["k50p0.9", "T1"])
    ap.add_argument("--parts", nargs="+", default=["model-free", "model-aware", "humans"],
                    choices=["model-free", "model-aware", "humans"])
    ap.add_argument("--humans", type=int, default=2000, help="model-free human texts (model-aware: --texts)")
    ap.add_argument("--probs-cache", type=Path, default=None, help="keep the LM passes here (re-runs decode only)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    b = Bench(args.probs_cache, 16)
    out: dict = {"texts": args.texts, "model_aware_variants": {k: {"parts": [UNION_PARTS[q] for q in v[0]],
                 "readings": [["all tokens", "floor 1e-4", "floor 1e-5"][g] for g in v[1]]} for k, v in AWARE.items()}}
    def save() -> None:  # after every part: a run stopped late keeps what it measured
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")

    for setting in args.settings:
        if "model-free" in args.parts:
            out.setdefault("model-free", {})[setting] = model_free(b, setting, args.texts)
            save()
        if "model-aware" in args.parts:
            out.setdefault("model-aware", {})[setting] = model_aware(b, setting, args.texts)
            save()
    if "humans" in args.parts:
        out["humans"] = humans(b, args.humans, args.texts)
        save()


if __name__ == "__main__":
    main()
