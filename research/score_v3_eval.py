"""Scoring measurement (docs/evaluation/scoring.md): model-free (v2, equal weights) vs model-aware weighted scoring.

Reads the texts `research/score_v3_gen.py` cached, re-tokenizes each as a verifier receives it and
decodes its first 50 / 100 / 200 tokens with the evaluation keys (levels 1 and 2):
- `v2`: the model-free decoder (equal weights; `Decoder.decode_ids`);
- `aware`: model-aware (`WeightedDecoder`, weights from the LM re-run on the text alone);
also human texts (false attribution, p-value uniformity), the same watermarked texts under a wrong key set
(uniformity), 50/50 and 80/20 two-user splices (both / one / none / third) and 10 % / 20 % replaced
tokens. Wilson 95 % intervals. Prints a JSON summary.

    python research/score_v3_eval.py --cache .hero/score-cache --json research/results/score-v3.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_v3_gen import eval_keyset, load_jsonl

from hero_eval.metrics import wilson
from verifier.engine.decoder import Decoder, token_ids
from verifier.engine.model_aware import level_probabilities
from verifier.engine.profile import default_profile
from verifier.engine.weighted_decode import WeightedDecoder, Weighting
from verifier.lm import load_model

LENGTHS = (50, 100, 200)


def cell(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


class Scorer:
    def __init__(self, model, tok, profile, keyset, weighting: Weighting, batch: int) -> None:
        self.model, self.tok, self.profile = model, tok, profile
        tables = {t.level: [t] for t in keyset.tables}
        self.dec = Decoder(profile, tables)
        self.wdec = WeightedDecoder(self.dec)
        self.weighting = weighting
        self.batch = batch
        self.lm_s = 0.0
        self.wd_s = 0.0
        self.n_aware = 0

    def probs(self, batch):
        t = time.perf_counter()
        out = level_probabilities(self.model, self.profile, batch, batch_size=self.batch)
        self.lm_s += time.perf_counter() - t
        return out

    def decode(self, batch, probs=None) -> dict[str, list[dict]]:
        """{'v2': results, 'aware': results} (dicts) for `batch` (prefix probabilities may be reused)."""
        out = {"v2": [r.to_dict() for r in self.dec.decode_ids(batch)]}
        probs = self.probs(batch) if probs is None else probs
        t = time.perf_counter()
        res = []
        for lo in range(0, len(batch), self.batch):
            part = slice(lo, lo + self.batch)
            res += self.wdec.decode_ids(batch[part], [self.weighting(p) for p in probs[part]])
        self.wd_s += time.perf_counter() - t
        self.n_aware += len(batch)
        out["aware"] = [r.to_dict() for r in res]
        return out


def user_of(r: dict) -> int | None:
    lv = r["levels"][1]
    return lv["fields"]["user"] if lv["status"] == "decoded" else None


def named(r: dict) -> set[int]:
    lv = r["levels"][1]
    if lv["status"] == "decoded":
        return {lv["fields"]["user"]}
    if lv["status"] == "mixed":
        return {c["fields"]["user"] for c in lv["candidates"] or []}
    return set()


def l1_p(r: dict) -> float:
    return r["levels"][0]["p_value"]


def replace(ids: list[int], frac: float, rng: random.Random, vocab: int) -> list[int]:
    out = list(ids)
    for i in rng.sample(range(len(out)), round(frac * len(out))):
        out[i] = rng.randrange(vocab)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=".hero/score-cache")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--humans", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clip", type=float, default=4.0)
    ap.add_argument("--mix", type=float, default=0.0)
    ap.add_argument("--json", default=None, help="merged into this file (one run per setting / humans)")
    ap.add_argument("--sub", type=int, default=0, help="texts for the replaced-token and splice cells (0: all)")
    ap.add_argument("--ratios", default="0.5,0.8")
    ap.add_argument("--parts", default="T1,k50p0.9,humans", help="what to run: T1, k50p0.9, humans")
    args = ap.parse_args()
    parts = args.parts.split(",")
    torch.set_num_threads(2)
    root = Path(args.cache)
    profile = default_profile()
    model, tok = load_model("smollm2")
    weighting = Weighting(clip=args.clip, mix=args.mix)
    sc = Scorer(model, tok, profile, eval_keyset(profile), weighting, args.batch)
    wrong = Scorer(model, tok, profile, eval_keyset(profile, "wrong"), weighting, args.batch)
    summary: dict = {"weighting": {"clip": args.clip, "mix": args.mix}, "settings": {}}
    null_p: dict[str, list[float]] = {"v2": [], "aware": []}
    null_l1: dict[str, list[float]] = {"v2": [], "aware": []}
    for setting in [p for p in ("T1", "k50p0.9") if p in parts]:
        recs = sorted(load_jsonl(root / f"gen_{setting}_{args.tokens}t.jsonl").values(), key=lambda r: r["i"])
        if args.limit:
            recs = recs[: args.limit]
        if not recs:
            continue
        users = [r["payload"]["user"] for r in recs]
        ids = token_ids(tok, [r["text"] for r in recs])
        full = [x[: max(LENGTHS)] for x in ids]
        probs_full = sc.probs(full)
        s: dict = {"texts": len(recs)}
        for n in LENGTHS:
            pre = [x[:n] for x in full]
            probs = [p[: len(_pos(x, profile))] for p, x in zip(probs_full, pre, strict=True)]
            res = sc.decode(pre, probs)
            for name, rs in res.items():
                s[f"exact_user_{n}_{name}"] = cell(sum(user_of(r) == u for r, u in zip(rs, users, strict=True)),
                                                   len(rs))
                wrong_user = sum(user_of(r) not in (None, u) for r, u in zip(rs, users, strict=True))
                s[f"wrong_user_{n}_{name}"] = cell(wrong_user, len(rs))
                s[f"tpr1e-3_all_{n}_{name}"] = cell(sum(r["p_value"] <= 1e-3 for r in rs), len(rs))
                s[f"tpr1e-3_l1_{n}_{name}"] = cell(sum(l1_p(r) <= 1e-3 for r in rs), len(rs))
            if n == max(LENGTHS):  # wrong keys: null p-values
                wr = wrong.decode(pre, probs)
                for name, rs in wr.items():
                    null_p[name] += [r["p_value"] for r in rs]
                    null_l1[name] += [l1_p(r) for r in rs]
                    s[f"wrongkey_named_{name}"] = cell(sum(bool(named(r)) for r in rs), len(rs))
        rng = random.Random(7)
        sub = full[: args.sub] if args.sub else full
        for frac in (0.1, 0.2):
            edited = [replace(x, frac, rng, profile.vocab_size) for x in sub]
            res = sc.decode(edited)
            for name, rs in res.items():
                s[f"exact_user_200_replaced{int(frac * 100)}_{name}"] = cell(
                    sum(user_of(r) == u for r, u in zip(rs, users[: len(rs)], strict=True)), len(rs))
        for ratio in [float(x) for x in args.ratios.split(",") if x]:
            m = len(sub)
            pairs = [(i, (i + 1) % m) for i in range(m) if users[i] != users[(i + 1) % m]]
            if not pairs:
                continue
            texts = [tok.decode(full[i][: round(ratio * 200)] + full[j][: 200 - round(ratio * 200)]) for i, j in pairs]
            spl = token_ids(tok, texts)
            res = sc.decode(spl)
            for name, rs in res.items():
                kinds = {"both": 0, "one": 0, "none": 0, "third": 0}
                for r, (i, j) in zip(rs, pairs, strict=True):
                    nm = named(r)
                    if nm - {users[i], users[j]}:
                        kinds["third"] += 1
                    elif {users[i], users[j]} <= nm:
                        kinds["both"] += 1
                    else:
                        kinds["one" if nm else "none"] += 1
                for k, v in kinds.items():
                    s[f"splice{int(ratio * 100)}_{k}_{name}"] = cell(v, len(rs))
        summary["settings"][setting] = s
        print(json.dumps({setting: s}), flush=True)
    hum = sorted(load_jsonl(root / "humans.jsonl").values(), key=lambda r: r["i"])[: args.humans]
    if "humans" not in parts:
        hum = []
    if hum:
        hids = [x[: max(LENGTHS)] for x in token_ids(tok, [h["text"] for h in hum]) if len(x) >= 60]
        h: dict = {"texts": len(hids)}
        res = sc.decode(hids)
        for name, rs in res.items():
            h[f"false_named_{name}"] = cell(sum(bool(named(r)) or r["levels"][0]["status"] == "decoded" for r in rs),
                                            len(rs))
            h[f"fpr1e-3_{name}"] = cell(sum(r["p_value"] <= 1e-3 for r in rs), len(rs))
            null_p[name] += [r["p_value"] for r in rs]
            null_l1[name] += [l1_p(r) for r in rs]
        summary["humans"] = h
    summary["ks_uniform"] = {
        name: {"text_p": _ks(null_p[name]), "level1_p": _ks(null_l1[name])} for name in null_p}
    summary["null_p"] = {"text": null_p, "level1": null_l1}
    summary["model_aware_cost"] = {
        "texts": sc.n_aware, "lm_s": round(sc.lm_s, 2), "weighted_decode_s": round(sc.wd_s, 2),
        "texts_per_s": round(sc.n_aware / max(sc.lm_s + sc.wd_s, 1e-9), 2), "device": "cpu (2 shared cores)"}
    if args.json:
        path = Path(args.json)
        merged = json.loads(path.read_text()) if path.exists() else {}
        merged[args.parts] = summary
        path.write_text(json.dumps(merged, indent=1) + "\n")
    summary.pop("null_p")
    print(json.dumps(summary, indent=1))


def _pos(x, profile):
    from verifier.engine.reference import scored_positions

    return scored_positions(list(x), profile.context_width)


def _ks(ps: list[float]) -> dict:
    if not ps:
        return {}
    r = sps.kstest(np.asarray(ps), "uniform")
    return {"n": len(ps), "statistic": round(float(r.statistic), 4), "pvalue": round(float(r.pvalue), 4)}


if __name__ == "__main__":
    main()
