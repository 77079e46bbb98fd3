"""Decode cost of spec v4 against v3 on the C kernel (CPU), alternated in one run (issue 46: <= 1.0x).

    python benchmarks/bench_decode_cost_v4.py [--texts 16] [--tokens 200] [--rounds 15] [--threads 1]

Three figures, each v4 and v3 run back to back in every round (the order alternating), timed in process CPU
time (time.process_time: this process's threads only, so the other processes of a shared host do not count):

- `kernel_same_values`: ns of CPU per (scored token, value) of the evidence kernel over all 256 public values of
  each profile's level-1 keys (the keys the decoder builds: `Decoder._level_keys(..., every_value=True)`). v4
  uses v3's construction and kernel, so the ratio should be ~1.0.
- `kernel_as_searched`: the same per (token, value) and per token over the values each profile searches: v4 its
  issued model ids (4 in policies/profiles/v4.yaml), v3 all 256. The per-token SipHash seed is then shared by 4
  values instead of 256, so v4's cost per (token, value) is higher while its cost per token is far lower.
- `moderator_decode`: a moderator's whole decode (`Decoder.decode_ids`, level-1 keys only) of the same texts,
  CPU ms per text.

Random token ids (what a human text looks like to the decoder: every value searched, nothing released early).
Prints one JSON line: per figure, each profile's median, and the v4 / v3 ratio of each round with its median and
a distribution-free 95 % interval (verifier.base.timing.median_interval). The load average is printed too.
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
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profiles", nargs=2, default=["v4", "v3"], metavar=("NEW", "BASE"))
    a = ap.parse_args()
    if a.texts < 1 or a.tokens < 8 or a.rounds < 1 or a.threads < 1:
        raise SystemExit("--texts, --rounds and --threads must be >= 1 and --tokens >= 8")

    import torch

    from gpu import cpu_kernel, prf
    from gpu.scoring import ScoringSpec
    from verifier.base.timing import load_average, median_interval
    from verifier.engine.decoder import Decoder
    from verifier.engine.keys import derive_level_table
    from verifier.engine.profile import resolve_profile

    if cpu_kernel.load() is None:
        raise SystemExit(f"C kernel unavailable: {cpu_kernel.error()}")
    torch.set_num_threads(a.threads)
    load_before = load_average()
    new, base = a.profiles
    profiles = {name: resolve_profile(name) for name in (new, base)}
    vocab = {p.vocab_size for p in profiles.values()}
    if len(vocab) != 1:
        raise SystemExit(f"the two profiles have different vocabularies: {sorted(vocab)}")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab.pop(), (a.texts, a.tokens), generator=g)
    lengths = torch.full((a.texts,), a.tokens, dtype=torch.int64)
    id_lists = ids.tolist()

    setups = {}
    for name, prof in profiles.items():
        table = derive_level_table(secrets.token_bytes(32), prof, 1, "l1-bench")
        dec = Decoder(prof, {1: [table]})
        spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride,
                           prof.windows)
        pk = prf.key_words([table.position])
        setups[name] = {
            "decoder": dec, "spec": spec, "pk": (pk[0][0], pk[1][0]),
            "every": dec._level_keys(1, table.version, every_value=True),
            "searched": dec._level_keys(1, table.version),
        }
        assert setups[name]["searched"].candidates == prof.levels[0].searched

    def kernel(name: str, which: str) -> tuple[float, int, int]:
        s = setups[name]
        keys = s[which]
        c0 = time.process_time()
        _, counts = cpu_kernel.segment_scores(ids, lengths, s["spec"], s["pk"], [keys], a.threads)
        return time.process_time() - c0, int(counts.sum()), keys.candidates

    def moderator(name: str) -> float:
        c0 = time.process_time()
        setups[name]["decoder"].decode_ids(id_lists)
        return time.process_time() - c0

    for name in (new, base):  # warm-up
        kernel(name, "every")
        moderator(name)
    same: dict[str, list[float]] = {new: [], base: []}
    searched_tv: dict[str, list[float]] = {new: [], base: []}
    searched_tok: dict[str, list[float]] = {new: [], base: []}
    mod: dict[str, list[float]] = {new: [], base: []}
    scored = 0
    for r in range(a.rounds):
        for name in ((new, base) if r % 2 == 0 else (base, new)):  # A, B, then B, A: drift hits both
            cpu_s, scored, values = kernel(name, "every")
            same[name].append(cpu_s * 1e9 / (scored * values))
            cpu_s, scored, values = kernel(name, "searched")
            searched_tv[name].append(cpu_s * 1e9 / (scored * values))
            searched_tok[name].append(cpu_s * 1e9 / scored)
            mod[name].append(moderator(name) * 1e3 / a.texts)

    def figure(series: dict[str, list[float]], unit: str) -> dict:
        ratio = median_interval([x / y for x, y in zip(series[new], series[base], strict=True)])
        return {"unit": unit, "median": {n: round(statistics.median(v), 3) for n, v in series.items()},
                f"{new}_over_{base}": {k: (round(v, 4) if k != "n" else v) for k, v in ratio.items()}}

    emit({"bench": "decode-cost-v4", "profiles": [new, base], "isa": cpu_kernel.load().isa(), "threads": a.threads,
          "texts": a.texts, "tokens": a.tokens, "scored_tokens": scored, "rounds": a.rounds, "timer": "process CPU",
          "values": {"every": {n: s["every"].candidates for n, s in setups.items()},
                     "searched": {n: s["searched"].candidates for n, s in setups.items()}},
          "kernel_same_values": figure(same, "ns CPU per (scored token, value)"),
          "kernel_as_searched": figure(searched_tv, "ns CPU per (scored token, value)"),
          "kernel_as_searched_per_token": figure(searched_tok, "ns CPU per scored token"),
          "moderator_decode": figure(mod, "ms CPU per text"),
          "load_average": {"before": load_before, "after": load_average()}})


if __name__ == "__main__":
    main()
