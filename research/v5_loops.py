"""Answers that loop when their length is forced: spec v5 against v4, SynthID-Text and plain sampling.

The chat evaluation forces every answer to 200 tokens (EOS suppressed). An answer "loops" when its last 60 tokens
hold at most 12 distinct token ids, or one 4-gram fills at least half of them (e.g. "Hiiii..." or a repeated
sentence). Reads the evaluation's cache (`hero eval --sections chat`), prints counts per method with Wilson
intervals and a two-sided Fisher test against plain sampling.

    python research/v5_loops.py --cache $HERO_HOME/eval-cache/seed0/chat-chat --json research/results/spec-v5-loops.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from scipy import stats as sps

from hero_eval.metrics import proportion

TAIL = 60


def loops(ids: list[int]) -> bool:
    tail = ids[-TAIL:]
    if len(set(tail)) <= 12:
        return True
    grams = Counter(tuple(tail[i : i + 4]) for i in range(len(tail) - 3))
    return bool(grams) and grams.most_common(1)[0][1] * 4 >= len(tail) // 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    cells = {}
    for f in sorted(args.cache.glob("*_200t_*k50p0.9.jsonl")):
        if "users0" in f.name or "repeat" in f.name:
            continue
        name = f.name.split("_")[0]
        recs = [json.loads(x) for x in f.read_text().splitlines()]
        k = sum(loops(r["ids"]) for r in recs)
        cells[name] = {"loops": k, "n": len(recs), "rate": proportion(k, len(recs))}
    plain = cells.get("unwatermarked")
    for c in cells.values():
        if plain:
            c["fisher_vs_plain"] = float(sps.fisher_exact([[c["loops"], c["n"] - c["loops"]],
                                                           [plain["loops"], plain["n"] - plain["loops"]]])[1])
    out = {"rule": f"last {TAIL} tokens: <= 12 distinct ids, or one 4-gram covering half", "cells": cells}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    for name, c in cells.items():
        print(name, c["loops"], "/", c["n"], c.get("fisher_vs_plain"))


if __name__ == "__main__":
    main()
