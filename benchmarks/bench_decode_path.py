"""The full decode path from token ids (decoder -> attribution -> results) against its evidence kernel alone.

    python benchmarks/bench_decode_path.py [--device cpu|cuda] [--batch 64 256] [--role auditor] [--profile default]
                                           [--marked 0.5] [--reps 5]
    python benchmarks/bench_decode_path.py --ab BASE_DIR NEW_DIR [--rounds 12] ...   (two checkouts, alternated)

Texts: `--batch` x 200 tokens of the profile's vocabulary; a share `--marked` carries a watermark (level-1
and level-2 payloads, drawn by the product's generation step over random logits, _common.marked_ids, so
they pass the level tests and their values are released with a confidence, the expensive branch), the rest are
random ids (the `absent` branch).
The marked texts are a pool of 32 tiled over the batch (decoding does not depend on repeats across texts).
Figures per batch (one JSON line each): `path_tokens_per_s` (Decoder.decode_ids, median of --reps),
`kernel_tokens_per_s` (gpu/evidence.segment_scores for the same levels) and their ratio. Tokenization is not
included (`hero bench tokenize` measures it). `--scoring model-aware` times the model-aware path (the LM re-run
with random SmolLM2-shaped weights, then the weighted statistic). `--ab` runs the path in one worker process
per checkout, rounds alternating, and prints each side's median seconds per batch and new/base.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from _common import alternate, emit, marked_ids

from verifier.engine.weighted_decode import DEFAULT_STATISTIC, STATISTICS

POOL = 32
TOKENS = 200


def _problem(batch: int, device: str, profile_name: str, levels: int, marked: float, seed: int = 0):
    """(profile, decoder, ids list, kernel call) with only APIs both sides of an A/B have."""
    import torch

    from verifier.engine.decoder import Decoder
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import resolve_profile

    prof = resolve_profile(profile_name)
    levels = levels or prof.depth
    tables = [derive_level_table(new_master_secret(), prof, lv, "bench") for lv in range(1, prof.depth + 1)]
    g = torch.Generator().manual_seed(seed)
    n_marked = round(batch * marked)
    ids = torch.randint(0, prof.vocab_size, (batch, TOKENS), generator=g)
    if n_marked:
        fields = [f for lv in prof.levels for f in lv.fields]
        pays = [{f.name: (7 * i + 3 * k) % (1 << f.bits) for k, f in enumerate(fields)} for i in range(POOL)]
        pool = marked_ids(prof, KeySet(tuple(tables)), pays, TOKENS, sigma=2.0, seed=seed + 1)
        ids[:n_marked] = pool[torch.arange(n_marked) % POOL]
    decoder = Decoder(prof, {t.level: [t] for t in tables[:levels]}, device=device)
    batch_ids = ids.tolist()

    def kernel() -> None:
        padded, lengths = decoder.pad(batch_ids)
        decoder._scores(padded, lengths, tables[0].version, [(t.level, t) for t in tables[:levels]])

    return prof, decoder, batch_ids, kernel


def _timed(fn, reps: int, device: str) -> list[float]:
    import torch

    fn()
    out = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def measure(a) -> None:
    import torch

    decode = None
    if a.scoring == "model-aware":  # the profile's LM shape with random weights: the cost, not the power
        from verifier.cli.bench_figures import random_smollm2
        from verifier.engine.model_aware import ModelAwareScorer
        from verifier.engine.weighted_decode import Weighting

        model = random_smollm2(a.device, "float32")
        scorer = ModelAwareScorer(lambda name, device: model, a.device, batch_size=a.lm_batch,
                                  weighting=Weighting(a.statistic))
        decode = scorer.decode_ids
    for batch in a.batch:
        prof, decoder, ids, kernel = _problem(batch, a.device, a.profile, a.levels, a.marked)
        run = (lambda: decoder.decode_ids(ids)) if decode is None else (lambda: decode(decoder, ids))  # noqa: B023
        path = _timed(run, a.reps, a.device)
        kern = _timed(kernel, a.reps, a.device)
        n = batch * TOKENS
        res = run()
        emit({"bench": "decode-path", "device": a.device, "scoring": a.scoring,
              "device_name": torch.cuda.get_device_name() if a.device == "cuda" else None,
              "threads": torch.get_num_threads(), "profile": prof.name, "role": a.role, "levels": len(decoder.tables),
              "batch": batch, "tokens": TOKENS, "marked": a.marked,
              "decoded_last_level": sum(r.levels[-1].status == "decoded" for r in res),
              "path_tokens_per_s": round(n / statistics.median(path)),
              "path_texts_per_s": round(batch / statistics.median(path), 1),
              "kernel_tokens_per_s": round(n / statistics.median(kern)),
              "path_over_kernel": round(statistics.median(kern) / statistics.median(path), 3),
              "path_s": [round(x, 4) for x in path], "kernel_s": [round(x, 4) for x in kern]})


def worker(checkout: str, a) -> None:
    sys.path.insert(0, checkout)
    import verifier

    _, decoder, ids, _ = _problem(a.batch[0], a.device, a.profile, a.levels, a.marked)
    decoder.decode_ids(ids)
    print("ready", Path(verifier.__file__).resolve().parents[1], flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        decoder.decode_ids(ids)
        print(time.perf_counter() - t0, flush=True)


def ab(a) -> None:
    dirs = [str(Path(d).resolve()) for d in a.ab]
    args = ["--device", a.device, "--batch", str(a.batch[0]), "--profile", a.profile, "--role", a.role,
            "--marked", str(a.marked)]
    secs = alternate([([sys.executable, str(Path(__file__).resolve()), "--worker", d, *args], d) for d in dirs],
                     a.rounds)
    ratios = [n / b for b, n in zip(*secs, strict=True)]
    emit({"bench": "decode-path-ab", "device": a.device, "profile": a.profile, "role": a.role, "batch": a.batch[0],
          "marked": a.marked, "rounds": a.rounds, "base": dirs[0], "new": dirs[1],
          "base_s": {"median": round(statistics.median(secs[0]), 4), "min": round(min(secs[0]), 4)},
          "new_s": {"median": round(statistics.median(secs[1]), 4), "min": round(min(secs[1]), 4)},
          "new_over_base": {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                            "max": round(max(ratios), 3)},
          "load_avg_1m": round(os.getloadavg()[0], 2)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, nargs="+", default=[64])
    ap.add_argument("--role", choices=["moderator", "auditor"], default="auditor")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--marked", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scoring", choices=["model-free", "model-aware"], default="model-free",
                    help="model-aware: the LM re-run (random SmolLM2-shaped weights) and the weighted statistic")
    ap.add_argument("--lm-batch", type=int, default=64, help="texts per LM forward pass (model-aware)")
    ap.add_argument("--statistic", choices=STATISTICS, default=DEFAULT_STATISTIC,
                    help="model-aware: the statistic summed (engine/weighted_decode.py)")
    ap.add_argument("--ab", nargs=2, metavar=("BASE", "NEW"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.levels = 1 if a.role == "moderator" else 0
    if a.worker:
        worker(a.worker, a)
    elif a.ab:
        ab(a)
    else:
        measure(a)


if __name__ == "__main__":
    main()
