"""CPU per text of one micro-batch through `verify_batch` (tokenize, decode, audit group commit, receipts), for
two checkouts side by side: one worker process per checkout, rounds alternating between them, so a machine
whose speed drifts by tens of percent from minute to minute slows both alike. Prints one JSON line.

    python research/bench_verify_batch_ab.py BASE_DIR NEW_DIR [--rounds 16] [--callers 4] [--texts 32]

Each directory is a checkout with its C kernel built (e.g. `git worktree add /tmp/base REV` and copy
gpu/_hero_kernels*.so). Moderator, default profile, a fresh SQLite home per worker; ~220-token BBC texts, cut once
by this checkout and handed to both sides in a file (the same texts, whatever each side ships).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _common import alternate, emit  # benchmarks/_common.py: the A/B round runner

BATCHES_PER_ROUND = 4


def worker(checkout: str, callers: int, texts_per_caller: int, texts_file: str) -> None:
    """Serves rounds on stdin ("go" -> one line: CPU us per text) with `checkout`'s code."""
    sys.path.insert(0, checkout)  # ahead of the path _common added (this script's own checkout)
    home = Path(tempfile.mkdtemp(prefix="hero-ab-"))
    os.environ["HERO_HOME"] = str(home)
    from verifier.api.context import build_context
    from verifier.audit.service import Actor
    from verifier.base.settings import Settings
    from verifier.engine.profile import resolve_profile
    from verifier.verify.runner import DecodeJob
    from verifier.verify.service import VerifyRequest, verify_batch

    settings = Settings(home=home, auto_migrate=True, profile="default")
    ctx = build_context(settings)
    profile = resolve_profile("default")
    ctx.store.initialize(profile)
    n = callers * texts_per_caller
    texts = json.loads(Path(texts_file).read_text())[:n]
    actor = Actor("bench", "moderator", "jti")
    requests = [VerifyRequest(DecodeJob(profile, tuple(texts[i * texts_per_caller:(i + 1) * texts_per_caller]), 1,
                                        settings.alpha), actor) for i in range(callers)]

    def batch() -> None:
        for out in verify_batch(ctx.runner, ctx.db, requests, ctx.signer, settings.checkpoint_interval_seconds):
            if isinstance(out, BaseException):
                raise out

    for _ in range(3):
        batch()
    import verifier

    print("ready", Path(verifier.__file__).resolve().parents[1], flush=True)
    for _ in sys.stdin:
        c0 = time.process_time()  # all threads of the process: the tokenizer's Rust threads included
        for _ in range(BATCHES_PER_ROUND):
            batch()
        print((time.process_time() - c0) / BATCHES_PER_ROUND / n * 1e6, flush=True)
    ctx.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--texts", type=int, default=32, help="texts per caller")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--texts-file", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.base, a.callers, a.texts, a.texts_file)
        return
    from verifier.cli.bench_figures import bench_texts
    from verifier.engine.profile import resolve_profile
    from verifier.lm import load_tokenizer

    texts_file = Path(tempfile.mkdtemp(prefix="hero-ab-texts-")) / "texts.json"
    texts_file.write_text(json.dumps(bench_texts(load_tokenizer(resolve_profile("default").tokenizer),
                                                 a.callers * a.texts)))
    dirs = [str(Path(d).resolve()) for d in (a.base, a.new)]
    us = alternate([([sys.executable, str(Path(__file__).resolve()), d, d, "--worker", "--callers", str(a.callers),
                      "--texts", str(a.texts), "--texts-file", str(texts_file)], d) for d in dirs], a.rounds)
    ratios = [b / a for a, b in zip(us[0], us[1], strict=True)]
    emit({"bench": "verify-batch-ab", "texts_per_batch": a.callers * a.texts, "rounds": a.rounds,
          "base": dirs[0], "new": dirs[1],
          "base_cpu_us_per_text": {"median": round(statistics.median(us[0]), 1), "min": round(min(us[0]), 1)},
          "new_cpu_us_per_text": {"median": round(statistics.median(us[1]), 1), "min": round(min(us[1]), 1)},
          "new_over_base": {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                            "max": round(max(ratios), 3)},
          "load_avg_1m": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
