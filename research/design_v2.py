"""Spec v2 design measurement: K_1 and context width h for exact whole-value `user` recovery.

Replay design (statistically exact up to context repeats): one plain sampling run of SmolLM2 on BBC
prompts records, at every step t, the warped next-token distribution P_t and the context; for every
candidate configuration (K_1, h) the HeRo sampler draws x_t from the same P_t with that
configuration's keys and payload. By Theorem 1 (Gumbel-max sampling is exact) the law of the
sequence of distributions along a watermarked text equals that along a plain one, so the evidence
of (context_t, x_t) pairs has the law a verifier sees on real watermarked text. Random token
replacement makes every position whose context or token was replaced pure Exp(1) noise (fresh PRF
inputs), which is what the script draws for them.

    python research/design_v2.py --prompts 128 --tokens 200 --setting t1 --out /tmp/v2design_t1.pt
    python research/design_v2.py --analyse /tmp/v2design_t1.pt

Level 2: one key per whole 12-bit value, ML over all 4096 values (and, at one configuration, v1's
six 2-bit segments for comparison). Level 1: v1 segments (6 x 2 bits, position key).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import secrets
import time

import torch

from gpu import cpu_kernel, prf
from gpu.sampler import route_and_sample

K1S = (10, 20, 40, 80)
HS = (2, 3, 4)
SEGMENTS = 6
LENGTHS = (25, 50, 100, 200)
ALPHA = 1e-4


def _load():
    try:
        from verifier.lm import load_model  # after the architecture move
    except ImportError:
        from verifier.engine.models import load_model
    try:
        from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article
    except ImportError:
        from verifier.engine.corpus import bbc_prompts_and_humans, prompt_from_article
    return load_model, bbc_prompts_and_humans, prompt_from_article


def _keys(n):
    return [secrets.token_bytes(16) for _ in range(n)]


def generate(args):
    from transformers import LogitsProcessor, LogitsProcessorList

    from verifier.engine.warpers import make_warpers

    load_model, prompts_and_humans, prompt_from_article = _load()
    model, tok = load_model("smollm2")
    arts, _ = prompts_and_humans(args.prompts, 0, seed=args.seed)
    prompts = [prompt_from_article(a.text, tok, 50) for a in arts]
    b = len(prompts)
    warpers = make_warpers(1.0, 50, 0.9) if args.setting == "provider" else make_warpers(1.0)
    cfgs = [(k1, h, "value") for k1 in K1S for h in HS] + [(80, 4, "segments")]
    keys = {c: {"pos": _keys(1)[0], "l1": _keys(4), "l2": _keys(4096 if c[2] == "value" else 4)} for c in cfgs}
    model_ids = torch.randint(0, 4096, (b,))
    users = torch.randint(0, 4096, (b,))
    seg_of = lambda v, k: (v >> (2 * (SEGMENTS - 1 - k))) & 3  # noqa: E731
    words = {c: {n: prf.key_words(keys[c][n]) for n in ("l1", "l2")} for c in cfgs}
    pos_words = {c: prf.key_words([keys[c]["pos"]]) for c in cfgs}
    drawn = {c: [] for c in cfgs}
    state = {"prompt_len": None}
    t0 = time.perf_counter()

    class Replay(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if state["prompt_len"] is None:
                state["prompt_len"] = input_ids.shape[1]
            warped = warpers(input_ids, scores.clone())
            for c in cfgs:
                k1, h, scheme = c
                ctx = input_ids[:, -h:]
                pw = pos_words[c]
                ps0, ps1 = cpu_kernel.prf_seed(pw[0].expand(b), pw[1].expand(b), ctx)
                k = (cpu_kernel.random_u32_stream(ps0, ps1, 1)[:, 0] * SEGMENTS) >> 32
                m1 = seg_of(model_ids, k)
                w1, w2 = words[c]["l1"], words[c]["l2"]
                m2 = users if scheme == "value" else seg_of(users, k)
                seeds = [cpu_kernel.prf_seed(w1[0][m1], w1[1][m1], ctx), cpu_kernel.prf_seed(w2[0][m2], w2[1][m2], ctx)]
                drawn[c].append(route_and_sample(warped, seeds, (k1,)))
            steps = len(drawn[cfgs[0]])
            if steps % 20 == 0:
                print(f"step {steps}/{args.tokens} at {time.perf_counter() - t0:.0f}s", flush=True)
            return warped

    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=True,
                             temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id,
                             logits_processor=LogitsProcessorList([Replay()]))
    print(f"generated {b} x {args.tokens} in {time.perf_counter() - t0:.0f}s", flush=True)
    cont = out[:, state["prompt_len"]:]
    torch.save({"setting": args.setting, "cont": cont, "model_ids": model_ids, "users": users,
                "cfgs": cfgs, "keys": keys, "drawn": {c: torch.stack(v, 1) for c, v in drawn.items()}}, args.out)


def _rows(cont, x, h, n):
    """Scored (context, token) rows of one text for its first n tokens: t >= h, first occurrence only."""
    seen, rows = set(), []
    for t in range(h, min(n, cont.shape[0])):
        ctx = tuple(cont[t - h:t].tolist())
        if ctx in seen:
            continue
        seen.add(ctx)
        rows.append((t, [*ctx, int(x[t])]))
    return rows


def _gamma_max_logp(n, s, m):
    from verifier.engine import stats

    return stats.log_max_pvalue(stats.log_gamma_sf(n, s), m)


def _bins(pairs, edges=(0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0001)):
    """Reliability diagram rows: [lo, hi, count, mean confidence, accuracy]."""
    rows = []
    for lo, hi in itertools.pairwise(edges):
        sel = [(c, ok) for c, ok in pairs if lo <= c < hi]
        if sel:
            rows.append([lo, hi, len(sel), sum(c for c, _ in sel) / len(sel), sum(ok for _, ok in sel) / len(sel)])
    return rows


def analyse(args):
    from verifier.engine import stats
    from verifier.engine.attribution import posterior

    d = torch.load(args.analyse, weights_only=False)
    cont, users, model_ids = d["cont"], d["users"], d["model_ids"]
    g = torch.Generator().manual_seed(1)
    report = {"setting": d["setting"], "texts": int(cont.shape[0]), "configs": []}
    for c in d["cfgs"]:
        k1, h, scheme = c
        keys = d["keys"][c]
        x = d["drawn"][c]
        pk = prf.key_words([keys["pos"]])
        l1 = prf.key_words(keys["l1"])
        l2 = prf.key_words(keys["l2"])
        from gpu.scoring import LevelKeys, ScoringSpec

        tables = [LevelKeys(1, *l1), LevelKeys(2, *l2, per_value=scheme == "value")]
        spec = ScoringSpec(h, 49152, (k1,), SEGMENTS)
        exact = {n: 0 for n in LENGTHS}
        argmax_ok = {n: 0 for n in LENGTHS}
        det50 = 0
        l1_exact = {n: 0 for n in LENGTHS}
        repl = {0.1: 0, 0.2: 0}
        reliability = []
        for i in range(cont.shape[0]):
            rows = _rows(cont[i], x[i], h, max(LENGTHS))
            if not rows:
                continue
            ids = torch.tensor([r for _, r in rows])
            ts = torch.tensor([t for t, _ in rows])
            (s1, s2), counts = cpu_kernel.segment_scores(
                ids, torch.full((len(rows),), h + 1), spec, (pk[0][0], pk[1][0]), tables)
            s1, s2, counts = s1[:, 0], s2[:, 0], counts[:, 0]
            # per-row segment (one scored token per row) and per-row evidence
            seg = counts.argmax(1)
            ev2 = s2[:, 0] if scheme == "value" else s2  # [rows, C] or [rows, K, C]
            truth = int(users[i])
            for n in LENGTHS:
                sel = ts < n
                nn = int(sel.sum())
                if scheme == "value":
                    tot = ev2[sel].sum(0)
                    best = int(tot.argmax())
                    lp = _gamma_max_logp(nn, float(tot[best]), 4096)
                    argmax_ok[n] += best == truth
                    exact[n] += best == truth and lp <= math.log(ALPHA)
                    if lp <= math.log(ALPHA):
                        conf, _ = posterior(tot.view(1, -1), torch.tensor([nn]), [best])
                        reliability.append((conf, best == truth))
                else:
                    per = ev2[sel].sum(0)  # [K, 4]
                    val = 0
                    for k in range(SEGMENTS):
                        val = (val << 2) | int(per[k].argmax())
                    argmax_ok[n] += val == truth
                # level 1: segments
                l1s = s1[sel].sum(0)  # [K, 4]
                cn = torch.bincount(seg[sel], minlength=SEGMENTS)
                logs, vals, ok_all = [], 0, True
                for k in range(SEGMENTS):
                    if int(cn[k]) == 0:
                        ok_all = False
                        vals <<= 2
                        continue
                    lpk = _gamma_max_logp(int(cn[k]), float(l1s[k].max()), 4)
                    logs.append(lpk)
                    ok_all &= lpk <= math.log(ALPHA / SEGMENTS)
                    vals = (vals << 2) | int(l1s[k].argmax())
                if n == 50 and stats.log_fisher(logs) <= math.log(1e-3):
                    det50 += 1
                l1_exact[n] += ok_all and vals == int(model_ids[i])
            if scheme == "value":
                for frac in repl:
                    n_tok = cont.shape[1]
                    hit = torch.rand(n_tok, generator=g) < frac
                    dirty = torch.zeros(n_tok, dtype=torch.bool)
                    for t in range(n_tok):
                        dirty[t] = bool(hit[max(0, t - h): t + 1].any())
                    keep = ~dirty[ts]
                    tot = ev2[keep].sum(0)
                    nd = int((~keep).sum())
                    if nd:
                        tot = tot + torch.distributions.Gamma(float(nd), 1.0).sample((4096,)).double()
                    best = int(tot.argmax())
                    lp = _gamma_max_logp(len(rows), float(tot[best]), 4096)
                    repl[frac] += best == truth and lp <= math.log(ALPHA)
        nt = cont.shape[0]
        rec = {"K1": k1, "h": h, "scheme": scheme,
               "user_exact_released": {n: exact[n] / nt for n in LENGTHS},
               "user_argmax_correct": {n: argmax_ok[n] / nt for n in LENGTHS},
               "user_exact_200_replaced": {str(f): v / nt for f, v in repl.items()},
               "level1_tpr_fpr1e-3_50": det50 / nt,
               "level1_exact_per_segment_rule": {n: l1_exact[n] / nt for n in LENGTHS},
               "reliability": _bins(reliability)}
        report["configs"].append(rec)
        print(json.dumps(rec), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--setting", choices=("t1", "provider"), default="t1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/v2design.pt")
    ap.add_argument("--analyse")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(1)  # on a shared 2-core machine OpenMP barriers of 2 threads burn CPU spinning
    if a.analyse:
        analyse(a)
    else:
        generate(a)


if __name__ == "__main__":
    main()
