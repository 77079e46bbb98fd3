"""Decode cost per text of spec v5 against v4 (CPU, C kernel), alternated in one run (issue 51: <= 1.0x).

    python benchmarks/bench_decode_cost_v5.py [--texts 16] [--tokens 200] [--rounds 11] [--threads 1]

Per round, v5 and v4 decode the same random texts (the order alternating), each with its own fresh keys, timed in
process CPU time (this process only: a shared host's other work does not count): the moderator's whole decode
(`Decoder.decode_ids`, level-1 keys) and the auditor's (levels 1-2: 4,096 user values). v5 reads each level under two
hypotheses, one kernel call each with its read filter (engine/multiplexed.py); v4 makes one call. Prints one JSON line:
per figure, each profile's median ms per text and the v5 / v4 ratio per round with its median and a
distribution-free 95 % interval. The load average is printed too.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time

from _common import emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profiles", nargs=2, default=["v5", "v4"], metavar=("NEW", "BASE"))
    a = ap.parse_args()
    import os

    import torch

    from verifier.base.timing import median_interval
    from verifier.engine.decoder import Decoder
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import resolve_profile

    torch.set_num_threads(a.threads)
    new, base = (resolve_profile(p) for p in a.profiles)
    decoders = {}
    for prof in (new, base):
        ks = KeySet(tuple(derive_level_table(new_master_secret(), prof, lv, f"l{lv}-v1")
                          for lv in range(1, prof.depth + 1)))
        decoders[prof.name] = {"moderator": Decoder(prof, {1: [ks.tables[0]]}),
                               "auditor": Decoder(prof, {1: [ks.tables[0]], 2: [ks.tables[1]]})}
    texts = [[secrets.randbelow(new.vocab_size) for _ in range(a.tokens)] for _ in range(a.texts)]
    times: dict = {role: {p.name: [] for p in (new, base)} for role in ("moderator", "auditor")}
    for r in range(a.rounds):
        order = (new, base) if r % 2 == 0 else (base, new)
        for role in ("moderator", "auditor"):
            for prof in order:
                t = time.process_time()
                decoders[prof.name][role].decode_ids(texts)
                times[role][prof.name].append((time.process_time() - t) * 1000 / a.texts)
    out = {"texts": a.texts, "tokens": a.tokens, "rounds": a.rounds, "threads": a.threads,
           "load": os.getloadavg(), "profiles": [new.name, base.name]}
    for role, per in times.items():
        ratios = [x / y for x, y in zip(per[new.name], per[base.name], strict=True)]
        out[role] = {"ms_per_text": {k: statistics.median(v) for k, v in per.items()},
                     "ratio_median": statistics.median(ratios), "ratio_interval": median_interval(ratios)}
    emit(out)


if __name__ == "__main__":
    main()
