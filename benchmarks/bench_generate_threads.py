"""`hero generate` tokens/s with its thread default (one torch thread per process) against torch's own default
(one thread per core), alternated in one run.

    python benchmarks/bench_generate_threads.py [--rounds 5] [--tokens 32] [--batch 1] [--profile v5]

Two worker processes run `hero generate`'s code path on one temporary dev-mode HERO_HOME with fresh keys:
verifier/cli/generate.py `set_threads`, then verifier.offline.LocalHero.generate of `--batch` prompts with
--min-new-tokens = --max-new-tokens = `--tokens` (every call draws exactly that many tokens per prompt), the model
loaded and one call made before the clock starts. `threads-1` is `hero generate` as shipped (no --threads, no
OMP_NUM_THREADS: one thread); `torch-default` leaves the thread count torch picks (the CLI has no spelling for it:
--threads takes 1..1024). Neither worker sees OMP_NUM_THREADS or MKL_NUM_THREADS. Each round asks both for one
call, the side going first alternating (_common.alternate), so a machine whose load drifts slows both alike.

Prints one JSON line: per side its threads and tokens/s (wall: what a user waits for) median with a
distribution-free 95 % interval, the per-round ratio threads-1 / torch-default, and the load average before and
after. Read it with the load: torch's default is as fast or faster on idle cores and collapses when other
processes hold them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, emit

from verifier.base.timing import load_average, median_interval
from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE

ROOT = str(Path(__file__).resolve().parents[1])
SIDES = ("threads-1", "torch-default")
NO_THREAD_ENV = ["env", "-u", "OMP_NUM_THREADS", "-u", "MKL_NUM_THREADS"]


def worker(side: str, home: str, tokens: int, batch: int) -> None:
    """Answers each "go" on stdin with the tokens/s of one `hero generate` call; writes its thread count to home."""
    os.environ.update({"HERO_HOME": home, "HERO_DEV_MODE": "1", "HERO_LOG_LEVEL": "WARNING"})
    import torch

    from verifier.cli.generate import set_threads

    if side == "threads-1":
        set_threads(None)  # what `hero generate` does without --threads
    from verifier.cli.bench_figures import bench_payloads
    from verifier.offline import LocalHero

    hero = LocalHero()
    model = hero.profile.tokenizer  # `hero generate`'s default model: the profile's own
    payloads = bench_payloads(hero.profile, batch)
    prompts = [f"Write a short story about item number {i}." for i in range(batch)]
    hero.model(model)

    def call() -> float:
        t0 = time.perf_counter()
        made = hero.generate(prompts, payloads, model=model, max_new_tokens=tokens, min_new_tokens=tokens,
                             batch_size=batch)
        return sum(g["tokens"] for g in made) / (time.perf_counter() - t0)

    call()  # warm-up: the first call sets up the sampler and the audit log
    (Path(home) / f"{side}.threads").write_text(str(torch.get_num_threads()))
    print("ready", ROOT, flush=True)
    for _ in sys.stdin:
        print(call(), flush=True)
    hero.close()


def _hero(env: dict[str, str], *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "verifier.cli", *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"hero {' '.join(args)} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")


def measure(a: argparse.Namespace, home: str) -> dict:
    """Keys for `a.profile` in `home`, then the two sides alternated for `a.rounds` rounds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_") or k == "HERO_MODEL_CACHE"}
    env.update({"HERO_HOME": home, "HERO_DEV_MODE": "1", "HERO_LOG_LEVEL": "WARNING"})
    _hero(env, "db", "upgrade")
    _hero(env, "keys", "init", "--profile", a.profile)
    args = ["--home", home, "--tokens", str(a.tokens), "--batch", str(a.batch)]
    load_before = load_average()
    per_side = alternate([([*NO_THREAD_ENV, sys.executable, str(Path(__file__).resolve()), "--worker", side, *args],
                           ROOT) for side in SIDES], a.rounds)
    ratios = [one / default for one, default in zip(*per_side, strict=True)]

    def interval(xs: list[float]) -> dict[str, float]:
        return {k: (round(v, 3) if k != "n" else v) for k, v in median_interval(xs).items()}

    return {"bench": "generate-threads", "profile": a.profile, "tokens": a.tokens, "batch": a.batch,
            "rounds": a.rounds, "cores": os.cpu_count(),
            "threads": {side: int((Path(home) / f"{side}.threads").read_text()) for side in SIDES},
            "tokens_per_s": {side: interval(xs) for side, xs in zip(SIDES, per_side, strict=True)},
            "tokens_per_s_each": {side: [round(x, 3) for x in xs] for side, xs in zip(SIDES, per_side, strict=True)},
            "threads_1_over_torch_default": interval(ratios),
            "load_average": {"before": load_before, "after": load_average()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per prompt and call")
    ap.add_argument("--batch", type=int, default=1, help="prompts per call (`hero generate --input`'s batch)")
    ap.add_argument("--profile", default=NEW_DEPLOYMENT_PROFILE, help="the keys' profile (default: a new deployment's)")
    ap.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.home, a.tokens, a.batch)
        return
    if a.rounds < 1 or not 1 <= a.tokens <= 4096 or not 1 <= a.batch <= 256:
        raise SystemExit("--rounds >= 1, --tokens in 1..4096, --batch in 1..256")
    home = tempfile.mkdtemp(prefix="hero-bench-threads-")
    try:
        emit(measure(a, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
