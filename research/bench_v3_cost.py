"""Per-value cost of the decoder's evidence kernel, spec v2 (SipHash + Philox per value) vs v3 (one SipHash per
token and level, one Philox block per value), on the C kernel (CPU), alternated in one run.

    python research/bench_v3_cost.py --texts 16 --tokens 200 --values 4096 --rounds 5
    perf stat -e instructions python research/bench_v3_cost.py --only v3 ...   # instruction counts

Prints ns per (scored token, value) for each round and the median ratio; `--isa` picks a kernel path.
`--moderator` instead times a moderator's whole decode (level-1 keys only, `Decoder.decode_ids`) of the same
texts under the v2 `default` profile (6 x 2-bit segments: 4 keys per token) and the `v3` profile (256 public
values per token), alternated: texts/s per core.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time

import torch

from gpu import cpu_kernel, prf
from gpu.scoring import LevelKeys, ScoringSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--values", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--isa")
    ap.add_argument("--only", choices=("v2", "v3"))
    ap.add_argument("--moderator", action="store_true")
    a = ap.parse_args()
    if a.moderator:
        return moderator(a)
    mod = cpu_kernel.load()
    if mod is None:
        raise SystemExit(f"C kernel unavailable: {cpu_kernel.error()}")
    if a.isa:
        mod.isa(a.isa)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 49152, (a.texts, a.tokens), generator=g)
    lengths = torch.full((a.texts,), a.tokens)
    spec = ScoringSpec(3, 49152, (80,), 4, 0, 8)
    pk = prf.key_words([secrets.token_bytes(16)])
    words = prf.key_words([secrets.token_bytes(16) for _ in range(a.values)])
    tables = {"v2": [LevelKeys(2, *words, per_value=True)],
              "v3": [LevelKeys(2, *words, per_value=True, seed_key=prf.key_words([secrets.token_bytes(16)]))]}
    names = [a.only] if a.only else ["v2", "v3"]
    n_scored = None
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(a.rounds):
        for name in names:  # alternated: both see the same machine load
            t0 = time.perf_counter()
            _, counts = cpu_kernel.segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), tables[name], a.threads)
            dt = time.perf_counter() - t0
            n_scored = int(counts.sum())
            times[name].append(dt * 1e9 / (n_scored * a.values))
    out = {"isa": mod.isa(), "threads": a.threads, "scored_tokens": n_scored, "values": a.values,
           "ns_per_token_value": {n: [round(x, 2) for x in v] for n, v in times.items()},
           "median_ns": {n: round(statistics.median(v), 2) for n, v in times.items()}}
    if len(names) == 2:
        out["v2_over_v3"] = round(statistics.median(times["v2"]) / statistics.median(times["v3"]), 2)
    print(json.dumps(out))


def moderator(a) -> None:
    from verifier.engine.decoder import Decoder
    from verifier.engine.keys import derive_level_table
    from verifier.engine.profile import resolve_profile

    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 49152, (a.texts, a.tokens), generator=g).tolist()
    decoders = {}
    for name in ("default", "v3"):
        prof = resolve_profile(name)
        decoders[name] = Decoder(prof, {1: [derive_level_table(secrets.token_bytes(32), prof, 1, "l1-v1")]})
    rates: dict[str, list[float]] = {n: [] for n in decoders}
    for _ in range(a.rounds):
        for name, dec in decoders.items():
            t0 = time.perf_counter()
            dec.decode_ids(ids)
            rates[name].append(a.texts / (time.perf_counter() - t0))
    print(json.dumps({"texts": a.texts, "tokens": a.tokens, "threads": a.threads,
                      "texts_per_s": {n: [round(x, 1) for x in v] for n, v in rates.items()},
                      "median_texts_per_s": {n: round(statistics.median(v), 1) for n, v in rates.items()}}))


if __name__ == "__main__":
    main()
