"""Spec v3 public level: how often a moderator's decode releases the exact `model` (v3 vs v2).

Real generation (the project's own `generate_watermarked`, SmolLM2-135M, BBC prompts) under a profile, then
the real `Decoder` holding level-1 keys only (a moderator) on the first 50 / 100 / 200 generated tokens
(token ids as generated, no re-tokenisation). Texts are cached under --cache (gitignored `.cache/`), one file
per (profile, setting, batch), so an interrupted run resumes and analysis reruns without the LM.

Under v3 a value's key does not depend on the field width (HKDF info carries the value only), so one set of
texts made with model ids < 2^6 is decoded with public tables of 2^6, 2^8, 2^10 and 2^12 values: the release
rate of each candidate field width from the same texts (the width only changes the multiple-testing cost).
At the shipped width the one-value test is measured too (`expect: {"model": m}`, verifier/engine/expected.py):
how often the true model matches (p <= 1e-4), and how often another model or human text does.

    python research/public_level_v3.py generate --profile v3 --setting t1 --texts 200 --batch 50
    python research/public_level_v3.py generate --profile default --setting t1 --texts 200 --batch 50
    python research/public_level_v3.py analyse --json research/results/spec-v3-public-level.json
    python research/public_level_v3.py analyse --retokenize --humans 2000 --json ...   (as a verifier sees them)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from verifier.engine.keys import KeyTable, derive_level_table
from verifier.engine.profile import resolve_profile

LENGTHS = (25, 50, 100, 200)
EXPECT_WIDTH = 8  # the shipped public width: the one-value test (`expect`) is measured there
WRONG = 5  # model ids asked about per human text (the one-value test's false matches on human text)
SETTINGS = {"t1": (1.0, None, None), "provider": (1.0, 50, 0.9)}
CACHE = Path(".cache/public_level_v3")
WIDTHS = (6, 8, 10, 12)


def _masters(seed: int) -> list[bytes]:
    g = torch.Generator().manual_seed(seed)
    return [bytes(torch.randint(0, 256, (32,), generator=g).tolist()) for _ in range(2)]


def generate(args) -> None:
    from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article
    from verifier.engine.keys import KeySet
    from verifier.lm import load_model
    from verifier.provider.generation import generate_watermarked

    profile = resolve_profile(args.profile)
    model, tok = load_model("smollm2")
    arts, _ = bbc_prompts_and_humans(args.texts, 0, seed=args.seed)
    prompts = [prompt_from_article(a.text, tok, 50) for a in arts]
    masters = _masters(args.seed)
    keyset = KeySet(tuple(derive_level_table(m, profile, lv, "v") for lv, m in enumerate(masters, start=1)))
    temperature, top_k, top_p = SETTINGS[args.setting]
    model_bits = profile.levels[0].value_bits
    out_dir = args.cache / f"{profile.name}-{args.setting}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(prompts), args.batch):
        path = out_dir / f"batch{start:05d}.pt"
        if path.exists():
            continue
        batch = prompts[start:start + args.batch]
        g = torch.Generator().manual_seed(args.seed * 100_003 + start + 1)  # per batch: resumable runs agree
        # model ids < 2^6 so that every candidate public width holds the true value (see the module docstring)
        payloads = [{"model": int(torch.randint(0, min(64, 1 << model_bits), (1,), generator=g)),
                     "user": int(torch.randint(0, 4096, (1,), generator=g))} for _ in batch]
        t0 = time.perf_counter()
        gens = generate_watermarked(model, tok, batch, payloads, profile, keyset, max_new_tokens=max(LENGTHS),
                                    min_new_tokens=max(LENGTHS), temperature=temperature, top_k=top_k, top_p=top_p)
        torch.save({"profile": profile.name, "setting": args.setting, "payloads": payloads,
                    "ids": [x.token_ids for x in gens], "seed": args.seed}, path)
        print(f"{path}: {len(batch)} texts in {time.perf_counter() - t0:.0f}s", flush=True)


def _ks_uniform(ps: list[float]) -> dict:
    from scipy import stats

    r = stats.kstest(ps, "uniform")
    return {"n": len(ps), "D": round(float(r.statistic), 4), "p": round(float(r.pvalue), 4)}


def _wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)]


def _moderator_tables(profile, master: bytes, width: int | None) -> list[KeyTable]:
    """Level-1 tables under `profile`, or (v3) a public table of 2^width values from the same master."""
    t = derive_level_table(master, profile, 1, "v")
    if width is None or profile.spec_version < 3:
        return [t]
    from verifier.engine.keys import HKDF_SALT_V3, _hkdf_many, v3_entry_info

    entries = tuple(_hkdf_many(master, HKDF_SALT_V3, [v3_entry_info(1, a, True) for a in range(1 << width)]))
    return [KeyTable(1, "v", entries, t.position, t.level_key)]


def _width_profile(profile, width: int):
    from verifier.engine.profile import profile_from_dict

    d = profile.to_dict()
    d["levels"][0]["fields"] = [{"name": "model", "bits": width}]
    d["segments"] = 2  # per-value levels do not depend on the segment count; it only sizes the fields
    d["levels"][0]["bits"] = width // 2
    d["levels"][1]["bits"] = 6
    return profile_from_dict(d)


def _retokenized(ids: list[list[int]]) -> list[list[int]]:
    from verifier.lm import load_tokenizer

    tok = load_tokenizer("smollm2")
    return tok([tok.decode(x) for x in ids], add_special_tokens=False)["input_ids"]


def analyse(args) -> None:
    from verifier.engine.decoder import Decoder

    report: dict = {"lengths": list(LENGTHS), "retokenized": bool(args.retokenize), "cells": []}
    for d in sorted(p for p in args.cache.iterdir() if p.is_dir()):
        batches = [torch.load(f, weights_only=False) for f in sorted(d.glob("batch*.pt"))]
        if not batches:
            continue
        name, setting = batches[0]["profile"], batches[0]["setting"]
        profile = resolve_profile(name)
        master = _masters(batches[0]["seed"])[0]
        ids = [x for b in batches for x in b["ids"]]
        if args.retokenize:  # as a verifier sees it: the text, tokenised again
            ids = _retokenized(ids)
        truth = [p["model"] for b in batches for p in b["payloads"]]
        widths = WIDTHS if profile.spec_version >= 3 else (None,)
        for width in widths:
            prof = _width_profile(profile, width) if width else profile
            dec = Decoder(prof, {1: _moderator_tables(prof, master, width)})
            cell = {"profile": name, "spec_version": profile.spec_version, "setting": setting,
                    "retokenized": bool(args.retokenize),
                    "model_bits": width or profile.levels[0].value_bits, "texts": len(ids)}
            for n in LENGTHS:
                res = dec.decode_ids([x[:n] for x in ids])
                exact = sum(r.levels[0].status == "decoded" and r.levels[0].fields["model"] == t
                            for r, t in zip(res, truth, strict=True))
                wrong = sum(r.levels[0].status == "decoded" and r.levels[0].fields["model"] != t
                            for r, t in zip(res, truth, strict=True))
                det = sum(r.p_value <= 1e-3 for r in res)
                cell[f"exact_{n}"] = exact / len(ids)
                cell[f"exact_{n}_ci95"] = _wilson(exact, len(ids))
                cell[f"wrong_{n}"] = wrong
                cell[f"detected_1e-3_{n}"] = det / len(ids)
                cell[f"statuses_{n}"] = {s: sum(r.levels[0].status == s for r in res)
                                         for s in ("decoded", "detected", "absent", "mixed")}
                if width == EXPECT_WIDTH:
                    cell.update(_expect_cell(dec, [x[:n] for x in ids], truth, n))
            report["cells"].append(cell)
            print(json.dumps(cell), flush=True)
    if args.humans:
        report["humans"] = humans(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


def _expect_cell(dec, ids: list, truth: list[int], n: int) -> dict:
    """The one-value test at prefix n, asked about every one of the 2^8 model ids for every text: how often the
    true model matches (p <= 1e-4), and the p-values of all the others (false matches; uniform, KS)."""
    import numpy as np

    from verifier.engine.expected import expected_log_p

    size = 1 << EXPECT_WIDTH
    lp = np.stack([expected_log_p(dec, ids, 1, v, [None] * len(ids)) for v in range(size)], axis=1)  # [T, 2^8]
    own = lp[np.arange(len(ids)), truth]
    others = np.exp(np.delete(lp.reshape(-1), np.arange(len(ids)) * size + np.asarray(truth)))
    hit = int((own <= math.log(1e-4)).sum())
    return {f"expect_match_{n}": hit / len(ids), f"expect_match_{n}_ci95": _wilson(hit, len(ids)),
            f"expect_false_{n}": [int((others <= 1e-4).sum()), int(others.size)],
            f"expect_false_ks_{n}": _ks_uniform(others.tolist())}


def humans(args) -> dict:
    """Human BBC text (first 200 tokens, re-tokenised) under a v3 moderator: releases and FPR at 1e-3 / 1e-4."""
    from hero_eval.corpus import bbc_prompts_and_humans
    from verifier.engine.decoder import Decoder
    from verifier.lm import load_tokenizer

    profile = resolve_profile("v3")
    tok = load_tokenizer("smollm2")
    _, arts = bbc_prompts_and_humans(0, args.humans, seed=args.seed)
    ids = [x[:max(LENGTHS)] for x in tok([a.text for a in arts], add_special_tokens=False)["input_ids"]]
    out = {}
    for width in (6, 8):  # the shipped width and the cheaper alternative
        prof = _width_profile(profile, width)
        res = Decoder(prof, {1: _moderator_tables(prof, _masters(args.seed)[0], width)}).decode_ids(ids)
        released = sum(r.levels[0].status in ("decoded", "mixed") for r in res)
        out[f"model_bits_{width}"] = {"texts": len(ids), "released_or_mixed": released,
                                      "fpr_1e-3": sum(r.p_value <= 1e-3 for r in res) / len(ids),
                                      "watermarked_1e-4": sum(r.watermarked for r in res)}
        if width == EXPECT_WIDTH:
            from verifier.engine.expected import expected_log_p

            dec = Decoder(prof, {1: _moderator_tables(prof, _masters(args.seed)[0], width)})
            lp = [float(expected_log_p(dec, [x], 1, (7 * i + j) % (1 << width), [None])[0])
                  for i, x in enumerate(ids) for j in range(WRONG)]
            out[f"model_bits_{width}"]["expect_false"] = [sum(x <= math.log(1e-4) for x in lp), len(lp)]
            out[f"model_bits_{width}"]["expect_p_ks"] = _ks_uniform([math.exp(x) for x in lp])
        print(json.dumps({"humans": width, **out[f"model_bits_{width}"]}), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("generate", "analyse"))
    ap.add_argument("--profile", default="v3")
    ap.add_argument("--setting", choices=tuple(SETTINGS), default="t1")
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--json")
    ap.add_argument("--humans", type=int, default=0, help="analyse: also decode this many human BBC texts")
    ap.add_argument("--retokenize", action="store_true",
                    help="analyse the texts as a verifier sees them (decoded to text, tokenised again)")
    a = ap.parse_args()
    torch.set_num_threads(1)  # shared 2-core machine: no OpenMP spinning
    generate(a) if a.mode == "generate" else analyse(a)


if __name__ == "__main__":
    main()
