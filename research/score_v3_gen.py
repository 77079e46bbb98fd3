"""Generate the texts the scoring measurement (docs/evaluation/scoring.md) decodes, into a resumable cache.

Real watermarked generations (the default profile, one fixed evaluation key set, a random `model` and
`user` per text) of SmolLM2-135M on BBC prompts, at T = 1 and at top-k 50 / top-p 0.9, `--tokens` new
tokens each (EOS suppressed), appended batch by batch to JSONL files under `--cache` (gitignored), with
the BBC human texts the same run uses. Settings are interleaved batch by batch so both cells grow
together; a killed run resumes where it stopped.

    python research/score_v3_gen.py --texts 256 --tokens 200 --batch 32 --cache .hero/score-cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
import zlib
from pathlib import Path

import torch

from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article
from hero_eval.sampling import PROVIDER, T1
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.profile import default_profile
from verifier.lm import load_model
from verifier.provider.generation import generate_watermarked

SEED = 32  # the number: fixes prompts, payloads, keys


def eval_keyset(profile, name: str = str(SEED)) -> KeySet:
    """A fixed evaluation key set (masters from a public seed: evaluation only, never a deployment)."""
    tables = []
    for lv in range(1, profile.depth + 1):
        master = hashlib.sha256(f"score-eval/{name}/level{lv}".encode()).digest()
        tables.append(derive_level_table(master, profile, lv, f"l{lv}-v1"))
    return KeySet(tuple(tables))


def payload(profile, i: int) -> dict[str, int]:
    rng = random.Random(f"score/{SEED}/{i}")
    return {f.name: rng.randrange(1 << f.bits) for lv in profile.levels for f in lv.fields}


def load_jsonl(path: Path) -> dict[int, dict]:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[r["i"]] = r
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--humans", type=int, default=400)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cache", default=".hero/score-cache")
    args = ap.parse_args()
    torch.set_num_threads(2)
    root = Path(args.cache)
    root.mkdir(parents=True, exist_ok=True)
    model, tok = load_model("smollm2")
    profile = default_profile()
    keyset = eval_keyset(profile)
    arts, humans = bbc_prompts_and_humans(args.texts, args.humans, SEED)
    prompts = [prompt_from_article(a.text, tok, 50) for a in arts]
    hpath = root / "humans.jsonl"
    if not hpath.exists():
        with hpath.open("w") as fh:
            for j, a in enumerate(humans):
                fh.write(json.dumps({"i": j, "text": a.body or a.text}) + "\n")
    settings = [T1, PROVIDER]
    paths = {s.name: root / f"gen_{s.name}_{args.tokens}t.jsonl" for s in settings}
    for start in range(0, args.texts, args.batch):
        for s in settings:
            done = load_jsonl(paths[s.name])
            idx = [i for i in range(start, min(start + args.batch, args.texts)) if i not in done]
            if not idx:
                continue
            gen = torch.Generator().manual_seed(zlib.crc32(f"{SEED}/{s.name}/{start}".encode()))
            torch.manual_seed(SEED * 7919 + start)
            t = time.perf_counter()
            pays = [payload(profile, i) for i in idx]
            out = generate_watermarked(
                model, tok, [prompts[i] for i in idx], pays, profile, keyset, max_new_tokens=args.tokens,
                min_new_tokens=args.tokens, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                generator=gen,
            )
            dt = time.perf_counter() - t
            with paths[s.name].open("a") as fh:
                for i, p, g in zip(idx, pays, out, strict=True):
                    fh.write(json.dumps({"i": i, "payload": p, "ids": g.token_ids, "text": g.text,
                                         "prompt": g.prompt}) + "\n")
            print(f"{s.name} {idx[0]}..{idx[-1]}: {dt:.0f} s", flush=True)


if __name__ == "__main__":
    main()
