"""Spec v4 design measurement: where a moderator's evidence goes on 50-token chat answers, lever by lever.

Replay design (as `research/design_v2.py`): one plain sampling run of SmolLM2-135M-Instruct on chat requests
(its chat template, top-k 50 / top-p 0.9, T = 1, `--tokens` new tokens, EOS suppressed) records every step's
warped next-token distribution. For every configuration the watermarked draw is simulated from the same
distributions: under Gumbel-max the chosen item of probability w has U = R^w (R uniform), so a level's
evidence -log(1 - U) has exactly the law a verifier reads on real text, up to context repeats (ignored).
Each routing level reads the conditional mass of its chunk; the opening's fresh tokens (spec 12.1: the first
h tokens and then until 8 nats of surprisal or 24 tokens) carry Exp(1) noise.

A level's p-value searching N values is 1 - (1 - Q(n, S))^N for the true value's sum S (a null value wins
the search with probability <= alpha, neglected); detection at p <= 1e-3, an exact value at p <= 1e-4.

    python research/v4_levers.py --record /tmp/v4_chat.pt --prompts 40 --tokens 100
    python research/v4_levers.py --analyse /tmp/v4_chat.pt --json benchmarks/results/spec-v4-levers.json
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
from scipy import special

from verifier.engine import weighted

V = 49152
H = 3
OPENING_NATS, OPENING_CAP = 8.0, 24
ALPHA_DET, ALPHA = 1e-3, 1e-4

# Written for this measurement (none from the BBC corpus): requests, how-to, emails, copy, science, stories,
# opinions, advice.
PROMPTS = [
    "How do I make a simple tomato pasta sauce?",
    "Write a short email to my landlord asking to fix the heating.",
    "Explain why the sky is blue to a ten-year-old.",
    "What are three tips for sleeping better?",
    "Write a product description for a reusable water bottle.",
    "Tell me a short story about a cat who learns to swim.",
    "What is the difference between weather and climate?",
    "Give me a plan for learning to run 5 kilometres.",
    "How does a refrigerator keep food cold?",
    "Write a polite message declining a meeting invitation.",
    "What should I pack for a weekend camping trip?",
    "Explain what a black hole is.",
    "Is it better to rent or buy a house? Give your opinion.",
    "Write a haiku about autumn leaves.",
    "How can I improve my handwriting?",
    "Summarise the main causes of the First World War.",
    "Write a birthday message for my grandmother.",
    "What are the benefits of learning a second language?",
    "How do vaccines work?",
    "Suggest a name and slogan for a new coffee shop.",
    "Explain how to change a flat bicycle tyre.",
    "Write a short poem about the sea.",
    "What is photosynthesis?",
    "Give me five ideas for a rainy day with kids.",
    "How do I write a good cover letter?",
    "Why do we have seasons on Earth?",
    "Write a complaint to a company about a late delivery.",
    "What are some healthy breakfast options?",
    "Describe a day in the life of a lighthouse keeper.",
    "How does the internet work, in simple terms?",
    "What do you think about working from home?",
    "Explain the rules of chess briefly.",
    "Write an advertisement for a bakery's new bread.",
    "How can I save money on groceries?",
    "What is the water cycle?",
    "Tell me a story about a robot who wants to be a gardener.",
    "How do I start a vegetable garden on a balcony?",
    "Explain what inflation is.",
    "Write a thank-you note to a teacher.",
    "What makes a good friend?",
]


def record(args: argparse.Namespace) -> None:
    from verifier.lm import load_model

    model, tok = load_model("smollm2")
    model.eval()
    torch.manual_seed(args.seed)
    prompts = PROMPTS[: args.prompts]
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts]
    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    eos = [t for t in {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")} if t is not None]
    rows: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in prompts]
    chosen: list[list[int]] = [[] for _ in prompts]
    past = None
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    t0 = time.time()
    with torch.no_grad():
        cur, cur_pos = ids, pos
        for _step in range(args.tokens):
            out = model(input_ids=cur, attention_mask=mask, position_ids=cur_pos, past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            logits[:, eos] = -math.inf
            top, idx = logits.topk(args.top_k, dim=-1)
            p = torch.softmax(top, dim=-1)
            keep = (p.cumsum(-1) - p) < args.top_p  # transformers' top-p: keep until the mass reaches top_p
            p = torch.where(keep, p, torch.zeros_like(p))
            p = p / p.sum(-1, keepdim=True)
            pick = torch.multinomial(p, 1).squeeze(1)
            nxt = idx.gather(1, pick.unsqueeze(1))
            for b in range(len(prompts)):
                k = keep[b]
                rows[b].append((idx[b][k].numpy().astype(np.int64), p[b][k].double().numpy()))
                chosen[b].append(int(nxt[b, 0]))
            cur = nxt
            mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
            cur_pos = cur_pos[:, -1:] + 1
    print(f"recorded {len(prompts)} x {args.tokens} in {time.time() - t0:.0f}s")
    answers = [tok.decode(c) for c in chosen]
    torch.save({"rows": rows, "answers": answers, "prompts": prompts, "top_k": args.top_k, "top_p": args.top_p},
               args.record)


# --- analysis ------------------------------------------------------------------------------------------------


def interleave(x: np.ndarray, stride: int) -> np.ndarray:
    a, r = divmod(V, stride)
    c, q = x % stride, x // stride
    return c * a + np.minimum(c, r) + q


def chunk_of(size: int, k: int, x: np.ndarray) -> np.ndarray:
    a, r = divmod(size, k)
    small = k - r
    return np.where(x < small * a, x // max(a, 1), small + (x - small * a) // (a + 1))


def logq(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    """log Q(n, s), the Gamma(n, 1) upper tail, with a log-space series where it underflows."""
    q = special.gammaincc(n, s)
    with np.errstate(divide="ignore"):
        out = np.log(q)
    bad = q < 1e-280
    if np.any(bad):
        nn, ss = n[bad], s[bad]
        out[bad] = (nn - 1) * np.log(ss) - ss - special.gammaln(nn) + np.log1p((nn - 1) / ss)
    return np.where(n > 0, out, 0.0)


def simulate(rows, schedule: tuple[int, ...], stride: int, reps: int, rng: np.random.Generator):
    """Per text, per rep, per position: evidence of every routing level and the last (in-chunk) level, the
    whole-token evidence, and whether the token was drawn fresh by the opening gate."""
    T = len(rows[0])
    L = len(schedule) + 1
    ev = np.zeros((len(rows), reps, T, L))
    qin = np.ones((len(rows), reps, T))  # the chosen token's probability inside its level-1 chunk
    whole = np.zeros((len(rows), reps, T))
    fresh = np.zeros((len(rows), reps, T), dtype=bool)
    for b, text in enumerate(rows):
        for r in range(reps):
            need = OPENING_NATS
            for t, (ids, p) in enumerate(text):
                x = interleave(ids, stride) if stride else ids
                j = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum()))
                j = min(j, len(p) - 1)
                is_fresh = t < H or (need > 0 and t < OPENING_CAP)
                if need > 0 and t < OPENING_CAP:
                    need -= -math.log(p[j])
                fresh[b, r, t] = is_fresh
                off, size, sel = 0, V, np.ones(len(p), dtype=bool)
                mass_parent = 1.0
                for li, k in enumerate(schedule):
                    c = chunk_of(size, k, x - off)
                    cj = c[j]
                    w = p[sel & (c == cj)].sum() / mass_parent
                    ev[b, r, t, li] = -math.log1p(-rng.random() ** w)
                    a, rr = divmod(size, k)
                    small = k - rr
                    start = cj * a if cj < small else small * a + (cj - small) * (a + 1)
                    sz = a if cj < small else a + 1
                    sel = sel & (c == cj)
                    mass_parent = mass_parent * w
                    off, size = off + start, sz
                q = p[j] / mass_parent
                qin[b, r, t] = q
                ev[b, r, t, L - 1] = -math.log1p(-rng.random() ** q)
                whole[b, r, t] = -math.log1p(-rng.random() ** p[j])
    noise = rng.exponential(size=ev.shape)
    ev = np.where(fresh[..., None], noise, ev)
    whole = np.where(fresh, rng.exponential(size=whole.shape), whole)
    return ev, whole, fresh, qin


def detect(ev: np.ndarray, n_tok: int, values: int, starts: tuple[int, ...] = (0,),
           alpha: float = ALPHA_DET) -> np.ndarray:
    """Fraction of (text, rep) whose level p over `values` values (and a Bonferroni scan of opening starts,
    token positions) is <= alpha, on the first n_tok tokens (scored positions h..n_tok-1)."""
    best = np.full(ev.shape[:2], 0.0)
    for s in starts:
        lo = max(H, s)
        seg = ev[:, :, lo:n_tok]
        n = np.full(seg.shape[:2], float(seg.shape[2]))
        lp = logq(n, seg.sum(-1))
        best = np.minimum(best, lp)
    lp = best + math.log(len(starts)) + math.log(values)
    return (lp <= math.log(alpha))


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    z = 1.96
    ph = k / n
    d = 1 + z * z / n
    c = (ph + z * z / (2 * n)) / d
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / d
    return [round(c - h, 3), round(c + h, 3)]


def rate(mask: np.ndarray) -> dict:
    """Rate over texts x reps; the CI counts texts (reps averaged per text) so it is not over-narrow."""
    per_text = mask.mean(axis=1)
    k = float(per_text.sum())
    return {"rate": round(float(mask.mean()), 3), "wilson95_texts": wilson(round(k), mask.shape[0])}


def analyse(args: argparse.Namespace) -> None:
    parts = [torch.load(path, weights_only=False) for path in args.analyse]
    data = parts[0]
    rows = [r for d in parts for r in d["rows"]]
    rng = np.random.default_rng(args.seed)
    T = len(rows[0])
    n50, n100 = min(50, T), min(100, T)
    out: dict = {"texts": len(rows), "tokens": T, "reps": args.reps, "top_k": data["top_k"], "top_p": data["top_p"],
                 "alpha_detect": ALPHA_DET, "alpha_value": ALPHA}
    ent = [float(-(p * np.log(p)).sum()) for text in rows for _, p in text]
    out["mean_token_entropy_nats"] = round(float(np.mean(ent)), 3)
    starts4 = (0, 8, 16, 24)
    starts7 = (0, 4, 8, 12, 16, 20, 24)
    cells = {}
    cache = {}
    for k1 in args.k1:
        for layout in ("contiguous", "interleaved"):
            if layout == "interleaved" and k1 >= V:
                continue
            stride = k1 if layout == "interleaved" else 0
            t0 = time.time()
            ev, whole, fresh, qin = simulate(rows, (k1,), stride, args.reps, rng)
            cache[(k1, layout)] = (ev, whole, fresh)
            lvl1, lvl2 = ev[..., 0], ev[..., 1]
            marked = ~fresh
            cell = {
                "level1_snr2_per_marked_token": round(float((lvl1[marked].mean() - 1) ** 2 / lvl1[marked].var()), 3),
                "level1_mean_excess_per_marked_token": round(float(lvl1[marked].mean() - 1), 3),
                "level2_mean_excess_per_marked_token": round(float(lvl2[marked].mean() - 1), 3),
                "fresh_tokens_first50_median": float(np.median(fresh[:, :, :n50].sum(-1))),
            }
            for nv in (1, 4, 16, 256):
                cell[f"detect50_N{nv}"] = rate(detect(lvl1, n50, nv))
                cell[f"detect50_N{nv}_scan4"] = rate(detect(lvl1, n50, nv, starts4))
                cell[f"model50_N{nv}"] = rate(detect(lvl1, n50, nv, alpha=ALPHA))
                cell[f"model50_N{nv}_scan4"] = rate(detect(lvl1, n50, nv, starts4, alpha=ALPHA))
                cell[f"model100_N{nv}_scan4"] = rate(detect(lvl1, n100, nv, starts4, alpha=ALPHA))
            cell["detect50_N4_scan7"] = rate(detect(lvl1, n50, 4, starts7))
            # the opening's end known (the oracle a model-aware verifier approaches): marked tokens only
            lvl1_or = np.where(fresh, 0.0, lvl1)
            n_or = (~fresh[:, :, H:n50]).sum(-1)
            s_or = lvl1_or[:, :, H:n50].sum(-1)
            for nv in (1, 4, 256):
                lp = logq(n_or.astype(float), s_or) + math.log(nv)
                cell[f"detect50_N{nv}_opening_known"] = rate(lp <= math.log(ALPHA_DET))
            # user (level 2, 4096 values) exact at 100 tokens, model-free, whole text and with the scan
            cell["user100_exact"] = rate(detect(lvl2, n100, 4096, alpha=ALPHA))
            cell["user100_exact_scan4"] = rate(detect(lvl2, n100, 4096, starts4, alpha=ALPHA))
            if T >= 200:
                cell["user200_exact"] = rate(detect(lvl2, 200, 4096, alpha=ALPHA))
                cell["model200_N4"] = rate(detect(lvl1, 200, 4, alpha=ALPHA))
                cell["model200_N256"] = rate(detect(lvl1, 200, 256, alpha=ALPHA))
            cell["model50_N4"] = rate(detect(lvl1, n50, 4, alpha=ALPHA))
            cell["model100_N4"] = rate(detect(lvl1, n100, 4, alpha=ALPHA))
            cell["model100_N256"] = rate(detect(lvl1, n100, 256, alpha=ALPHA))
            # model-aware user, generator weights (the generator's own in-chunk probabilities: an upper bound on
            # a re-run without the prompt), linear statistic of spec 16.1 with clip 4
            for n_tok in (100, 200) if T >= 200 else (100,):
                w = np.minimum(weighted.optimal_weight(qin[:, :, H:n_tok]), 4.0)
                x = (w * lvl2[:, :, H:n_tok]).sum(-1)
                lp = weighted.weighted_log_sf(w.reshape(-1, w.shape[-1]), x.reshape(-1)).reshape(x.shape)
                lp = lp + math.log(4096)
                cell[f"user{n_tok}_exact_model_aware_upper"] = rate(lp <= math.log(ALPHA))
            cells[f"K1={k1},{layout}"] = cell
            print(f"K1={k1} {layout} ({time.time() - t0:.0f}s):", json.dumps(cell), flush=True)
    out["cells"] = cells
    # whole-token Gumbel-max zero-bit limit (one key known, N = 1): any cell's `whole` draws
    ev, whole, fresh = next(iter(cache.values()))
    out["zero_bit_whole_token"] = {
        "detect50": rate(detect(whole, n50, 1)),
        "detect50_scan4": rate(detect(whole, n50, 1, starts4)),
        "snr2_per_marked_token": round(float((whole[~fresh].mean() - 1) ** 2 / whole[~fresh].var()), 3),
        "mean_excess_per_marked_token": round(float(whole[~fresh].mean() - 1), 3),
    }
    # (b) a value-independent detection component: routing level 0 (K_d chunks, one key, N = 1), then the model
    # level inside it (K_m sub-chunks, 256 values), then the user
    vi = {}
    for kd, km in ((80, 16), (160, 8), (320, 4)):
        ev, _, fresh, _ = simulate(rows, (kd, km), 0, args.reps, rng)
        vi[f"Kd={kd},Km={km}"] = {
            "detect50_N1_scan4": rate(detect(ev[..., 0], n50, 1, starts4)),
            "model50_N256_scan4": rate(detect(ev[..., 1], n50, 256, starts4, alpha=ALPHA)),
            "model100_N256_scan4": rate(detect(ev[..., 1], n100, 256, starts4, alpha=ALPHA)),
            "user100_exact_scan4": rate(detect(ev[..., 2], n100, 4096, starts4, alpha=ALPHA)),
        }
        print("value-independent", kd, km, json.dumps(vi[f"Kd={kd},Km={km}"]), flush=True)
    out["value_independent_component"] = vi
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "cells"}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record")
    ap.add_argument("--analyse", nargs="+", help="one or more recordings (their texts pooled)")
    ap.add_argument("--json")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--k1", type=int, nargs="+", default=[80, 160, 320, 640, 1280])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.record:
        record(args)
    if args.analyse:
        analyse(args)


if __name__ == "__main__":
    main()
