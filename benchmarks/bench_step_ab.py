"""The C generation step (gpu/step.py `FusedSampler.step`, native backend) of two checkouts, alternated in one run.

    python benchmarks/bench_step_ab.py BASE_DIR NEW_DIR [--logits smollm2|gemma3-270m|random] [--batch 16]
                                       [--profile v4] [--steps 5] [--rounds 21]

Each directory is a checkout with its C kernel built in place (`git worktree add /tmp/base REV`, then
`python setup.py build_ext --inplace` there). Logits: one next-token row per prompt from the named model (its
real distribution at T = 1, no truncation; computed once here and handed to both sides in a file), or N(0, 3)
noise over `--vocab`. Both sides build the profile over the logits' vocabulary with the same fixed keys, so they
do the same work on the same rows. A round times `--steps` steps on one thread in process CPU time per side, the
side going first alternating. Prints one JSON line: each side's median ms per step, and new / base per round
(median and a distribution-free 95 % interval).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, emit

PROMPTS = [f"Write a short story about item number {i}. Once upon a time" for i in range(64)]


def _logits(source: str, batch: int, vocab: int, path: str) -> int:
    """Writes [batch, V] float32 logits to `path`; returns V."""
    import torch

    if source == "random":
        x = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(0)) * 3
    else:
        from verifier.lm import load_model

        model, tok = load_model(source, "cpu")
        with torch.no_grad():
            x = torch.stack([model(tok(p, return_tensors="pt").input_ids).logits[0, -1].float()
                             for p in PROMPTS[:batch]])
    torch.save(x.contiguous(), path)
    return x.shape[1]


def worker(checkout: str, logits_path: str, profile_name: str, steps: int) -> None:
    sys.path.insert(0, checkout)
    from dataclasses import replace

    import torch

    import verifier
    from gpu.step import ContextLog
    from verifier.engine.fused import make_fused_sampler
    from verifier.engine.keys import KeySet, derive_level_table
    from verifier.engine.profile import resolve_profile

    torch.set_num_threads(1)
    logits = torch.load(logits_path)
    b, v = logits.shape
    prof = replace(resolve_profile(profile_name), vocab_size=v)
    keys = KeySet(tuple(derive_level_table(bytes(range(32)), prof, lv, "bench") for lv in range(1, prof.depth + 1)))
    fs = make_fused_sampler(prof, keys)
    pay = torch.zeros(b, prof.segments, prof.depth, dtype=torch.int64)
    gen = torch.Generator().manual_seed(1)

    def run() -> float:
        t0 = time.process_time()
        for _ in range(steps):
            done = torch.full((b,), 64, dtype=torch.int64)  # past the opening: every row marked
            ctx = torch.randint(0, v, (b, prof.context_width), generator=gen)
            fs.step(logits, ctx, pay, done, ContextLog.empty(b, prof.context_width, capacity=8), backend="native")
        return (time.process_time() - t0) / steps

    run()
    print("ready", Path(verifier.__file__).resolve().parents[1], flush=True)
    for _ in sys.stdin:
        print(run(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", metavar="DIR")
    ap.add_argument("--logits", default="smollm2", help="a model name (verifier/lm) or 'random'")
    ap.add_argument("--vocab", type=int, default=49152, help="with --logits random")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--profile", default="v4")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--worker", nargs=2, metavar=("CHECKOUT", "LOGITS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.profile, a.steps)
        return
    if len(a.dirs) != 2 or a.batch < 1 or a.steps < 1 or a.rounds < 1:
        ap.error("two checkouts BASE_DIR NEW_DIR; --batch, --steps and --rounds >= 1")
    if a.batch > len(PROMPTS):
        ap.error(f"--batch is at most {len(PROMPTS)}")
    from verifier.base.timing import median_interval

    dirs = [str(Path(d).resolve()) for d in a.dirs]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "logits.pt")
        vocab = _logits(a.logits, a.batch, a.vocab, path)
        secs = alternate([([sys.executable, str(Path(__file__).resolve()), "--worker", d, path, "--profile",
                            a.profile, "--steps", str(a.steps)], d) for d in dirs], a.rounds)
    ratios = [n / b for b, n in zip(*secs, strict=True)]
    emit({"bench": "step-ab", "logits": a.logits, "vocab": vocab, "batch": a.batch, "profile": a.profile,
          "steps": a.steps, "rounds": a.rounds, "base": dirs[0], "new": dirs[1], "threads": 1,
          "base_ms_per_step": round(1000 * statistics.median(secs[0]), 3),
          "new_ms_per_step": round(1000 * statistics.median(secs[1]), 3),
          "new_over_base": {k: round(x, 3) for k, x in median_interval(ratios).items()},
          "load_avg_1m": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
