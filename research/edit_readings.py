"""The union's edit readings (spec 16.6): which edit floors, measured on the evaluation's own texts and attack.

Reads the HeRo-v3 texts `hero eval --sections attribution` generated (its cache, seed 0; T = 1 and top-k 50 /
top-p 0.9), replaces 10 % / 20 % of each text's tokens exactly as the evaluation's attack does (same seeds)
or by plausible substitutes (`sub10` / `sub20`: the LM's top-50 given the original prefix, the original
excluded: the edits an LLM or a masked LM makes, which an edit floor cannot see), re-tokenizes as a
verifier receives the text, runs the LM once per text and decodes model-aware with the union under several
edit-floor choices on the same LM passes:

- `none`: the three readings of spec 16.5 only (the default before 2026-11-28);
- `F` or `F1,F2`: the default layout, three more readings per floor (`Weighting(UNION, edit_floors=...)`);
- `only@F`: the three readings with the flagged positions dropped and no unedited readings (what a single
  floor would do if the union did not keep the verbatim readings; for comparison only).

Per setting: exact `user`, detection (p <= 1e-3) and wrong `user` on the verbatim 50- / 100-token prefixes
and on the edited 200-token texts, plus human BBC texts (any value released). Wilson 95 % intervals.

    hero eval --sections attribution --prompts 200 --tokens 200 --seed 0 --settings T1 k50p0.9 \\
        --attr-methods HeRo-v3 --attr-plan col_users=0 --generate-only --out /tmp/ev   # the texts
    python research/edit_readings.py --texts 100 --variants none only@1e-4 1e-4 1e-5 1e-4,1e-5 \\
        --json research/results/edit-readings.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from hero_eval import attacks
from hero_eval.attribution import build_attr_method, user_value
from hero_eval.corpus import bbc_prompts_and_humans
from hero_eval.methods import VOCAB
from hero_eval.metrics import wilson
from hero_eval.runner import cache_root
from verifier.engine.model_aware import level_probabilities, text_logits
from verifier.engine.reference import scored_positions
from verifier.engine.weighted_decode import UNION, WeightedDecoder, Weighting, edited_positions
from verifier.lm import load_model

SETTINGS = {"T1": "", "k50p0.9": "_k50p0.9"}
# (name, fraction, attack): REP = the evaluation's uniform replacement; SUB = an LM's plausible substitutes
# (attacks.lm_substitute, top-50 of SmolLM2 given the original prefix), which the edit floors cannot see.
EDITS = (("verbatim", 0.0, None), ("rep10", 0.1, "REP"), ("rep20", 0.2, "REP"), ("sub10", 0.1, "SUB"),
         ("sub20", 0.2, "SUB"))


def hash_ids(recs: list[dict]) -> str:
    return hashlib.sha256(json.dumps([r["ids"] for r in recs]).encode()).hexdigest()[:12]


def cell(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 4), "ci95": [round(lo, 4), round(hi, 4)]}


class Bench:
    def __init__(self, probs_cache: Path | None, batch: int) -> None:
        self.model, self.tok = load_model("smollm2")
        self.method = build_attr_method("HeRo-v3", 0)  # the evaluation's keys (seed 0)
        self.profile = self.method.profile
        self.h = self.profile.context_width
        self.level = self.profile.field_level("user")
        self.cache, self.batch = probs_cache, batch

    def seen(self, id_lists: list[list[int]]) -> list[list[int]]:
        return [self.tok(self.tok.decode(x, skip_special_tokens=True), add_special_tokens=False)["input_ids"]
                for x in id_lists]

    def probs(self, key: str, ids: list[list[int]]) -> list[np.ndarray]:
        """The LM pass of each text (kept under --probs-cache: every variant decodes the same passes)."""
        f = self.cache / f"probs_{key}.pkl" if self.cache else None
        if f is not None and f.exists():
            kept = pickle.loads(f.read_bytes())
            if kept["ids"] == ids:  # the passes of exactly these texts
                return kept["probs"]
        out = level_probabilities(self.model, self.profile, ids, batch_size=self.batch)
        if f is not None:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(pickle.dumps({"ids": ids, "probs": out}))
        return out

    def weights(self, variant: str, p: np.ndarray, ids: list[int]) -> np.ndarray:
        if variant.startswith("only@"):
            w = Weighting(UNION)(p)
            w[:, edited_positions(p, ids, self.h, float(variant[5:])), :] = 0.0
            return w
        floors = () if variant == "none" else tuple(float(f) for f in variant.split(","))
        return Weighting(UNION, edit_floors=floors).for_text(p, ids, self.h)

    def decode(self, variant: str, ids: list[list[int]], probs: list[np.ndarray]):
        w = [self.weights(variant, p, x) for p, x in zip(probs, ids, strict=True)]
        return WeightedDecoder(self.method._decoder, statistic=UNION).decode_ids(ids, w)

    def next_token_probs(self, ids: list[list[int]]):
        """Per text, [len, V] float32 P(x_t | x_<t) (row 0 unused): what `attacks.lm_substitute` draws from."""
        for r, logits in text_logits(self.model, ids, batch_size=self.batch):
            probs = torch.softmax(logits.float(), -1)
            yield torch.cat([probs[:1], probs[: len(r) - 1]]).numpy()

    def attacked(self, recs: list[dict], frac: float, kind: str | None) -> list[list[int]]:
        if kind is None:
            return [r["ids"] for r in recs]
        if kind == "REP":  # the evaluation's attack, its seeds (attribution_eval.MethodEval._replaced)
            return [attacks.replace(r["ids"], frac, VOCAB, random.Random(f"0/REP/{frac}/{r['i']}")) for r in recs]
        f = self.cache / f"sub_{frac}_{len(recs)}_{recs[0]['i']}_{hash_ids(recs)}.json" if self.cache else None
        if f is not None and f.exists():
            return json.loads(f.read_text())
        originals = [r["ids"] for r in recs]
        out = [attacks.lm_substitute(x, frac, random.Random(f"0/SUB/{frac}/{r['i']}"), p)
               for r, x, p in zip(recs, originals, self.next_token_probs(originals), strict=True)]
        if f is not None:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(out))
        return out

    def user(self, r) -> int | None:
        lv = r.levels[self.level - 1]
        return lv.fields.get("user") if lv.status == "decoded" else None


def named_users(level) -> set[int]:
    """Every `user` a level result puts a name to: its decoded value and its `mixed` candidates."""
    out = {level.fields["user"]} if level.status == "decoded" else set()
    return out | {c["fields"]["user"] for c in level.candidates or []}


def texts(setting: str, n: int) -> list[dict]:
    paths = sorted((cache_root() / "seed0").glob(f"HeRo-v3_*_200t_user12_*{SETTINGS[setting]}.jsonl"))
    paths = [p for p in paths if setting != "T1" or not p.stem.endswith("k50p0.9")]
    if not paths:
        raise SystemExit(f"no HeRo-v3 {setting} texts in {cache_root()}: run the hero eval command first")
    recs = {}
    for line in paths[0].read_text().splitlines():
        r = json.loads(line)
        recs[r["i"]] = r
    return [recs[i] for i in sorted(recs)][:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=100)
    ap.add_argument("--variants", nargs="+", default=["none", "only@1e-4", "1e-4", "1e-5", "1e-4,1e-5"])
    ap.add_argument("--probs-cache", type=Path, default=None, help="keep the LM passes here (re-runs decode only)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--edits", nargs="+", default=None, choices=[e[0] for e in EDITS],
                    help="only these edit kinds (default: all)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    b = Bench(args.probs_cache, args.batch)
    out: dict = {"texts": args.texts, "variants": args.variants, "settings": {}}
    for setting in SETTINGS:
        recs = texts(setting, args.texts)
        users = [user_value(0, r["i"]) for r in recs]
        res: dict = {}
        for name, frac, kind in EDITS:
            if args.edits and name not in args.edits:
                continue
            ids = b.seen(b.attacked(recs, frac, kind))
            probs = b.probs(f"{setting}_{name}_{args.texts}", ids)
            for length in ([200] if frac else [50, 100]):
                cut = [x[:length] for x in ids]
                pr = [p[: len(scored_positions(list(c), b.h))] for p, c in zip(probs, cut, strict=True)]
                for v in args.variants:
                    rs = b.decode(v, cut, pr)
                    got = [b.user(r) for r in rs]
                    res[f"{name}@{length} {v}"] = {
                        "exact": cell(sum(g == u for g, u in zip(got, users, strict=True)), len(rs)),
                        "detected": cell(sum(r.p_value <= 1e-3 for r in rs), len(rs)),
                        "wrong": sum(g not in (None, u) for g, u in zip(got, users, strict=True)),
                    }
                    x = res[f"{name}@{length} {v}"]
                    print(f"{setting} {name}@{length} {v}: exact {x['exact']['k']}/{len(rs)} "
                          f"detected {x['detected']['k']} wrong {x['wrong']}", flush=True)
        out["settings"][setting] = res
    _, humans = bbc_prompts_and_humans(1, args.texts, 0)
    hids = [x[:200] for x in b.seen([b.tok(a.body or a.text, add_special_tokens=False)["input_ids"][:200]
                                      for a in humans])]
    hp = b.probs(f"humans_{args.texts}", hids)
    out["humans"] = {}
    for v in args.variants:
        rs = b.decode(v, hids, hp)
        released = sum(any(lv.status == "decoded" for lv in r.levels) for r in rs)
        out["humans"][v] = {"released": cell(released, len(rs)), "min_p": min(r.p_value for r in rs)}
        print(f"humans {v}: released {released}/{len(rs)}, smallest p {out['humans'][v]['min_p']:.2e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
