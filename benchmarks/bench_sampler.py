"""One watermarked generation step (gpu/step.py `FusedSampler.step`, every row marked) vs softmax + multinomial,
per vocabulary size.

    python benchmarks/bench_sampler.py [--vocabs 32000,49152,262144] [--batches 1,32]
"""

from __future__ import annotations

import argparse

from _common import emit

from verifier.base.timing import summary, timed


def sampler_figures(vocab: int, batch: int = 1, reps: int = 50, device: str = "cpu") -> dict:
    """One fused step (gpu/step.py `FusedSampler.step`, every generation path's: mark rule, positions, seeds,
    routing, Gumbel-max), every row a marked draw, vs softmax + multinomial."""
    import torch

    from verifier.engine.fused import make_fused_sampler
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import make_profile

    profile = make_profile((2, 2), 24, vocab, spec_version=2)
    tables = [derive_level_table(new_master_secret(), profile, lv, "bench") for lv in (1, 2)]
    fs = make_fused_sampler(profile, KeySet(tuple(tables)), device)
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(batch, vocab, generator=gen) * 3).to(device)
    context = torch.randint(0, vocab, (batch, profile.context_width), generator=gen).to(device)
    payload = torch.randint(0, 4, (batch, profile.segments, 2), generator=gen)
    payload[:, :, 1] = torch.randint(0, 4096, (batch, 1), generator=gen)  # level 2: one whole 12-bit value
    payload = payload.to(device)
    generated = torch.empty(batch, dtype=torch.int64, device=device)
    log = fs.new_log(batch)

    def step() -> object:
        generated.fill_(profile.context_width)  # a continuation context not seen before: a marked draw
        log.counts.zero_()
        return fs.step(logits, context, payload, generated, log)

    sync = device == "cuda"
    hero = timed(step, reps, warmup=3, sync=sync)
    plain = timed(lambda: torch.multinomial(torch.softmax(logits, -1), 1), reps, warmup=3, sync=sync)
    return {"bench": "sampler", "vocab": vocab, "batch": batch, "device": device,
            "hero_step_s": summary(hero), "multinomial_step_s": summary(plain)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocabs", default="32000,49152,262144")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    for v in (int(x) for x in a.vocabs.split(",")):
        for b in (int(x) for x in a.batches.split(",")):
            emit(sampler_figures(v, b, a.reps, a.device))


if __name__ == "__main__":
    main()
