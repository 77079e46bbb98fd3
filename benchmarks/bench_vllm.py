"""vLLM throughput with the HeRo plugin watermarking every request vs the same engine with no payloads.

    .venv-vllm/bin/python benchmarks/bench_vllm.py [--batch 16] [--tokens 64] [--reps 5]
    (VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind; scripts/test-vllm sets them)

One engine (the plugin is loaded through the entry point either way); each repetition runs the plain batch and
the watermarked batch back to back, the order alternating, so load drift on a shared machine hits both alike.
Prints one JSON line: tokens/s (median), overhead of the watermarked batches in percent.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    a = ap.parse_args()

    from tests.helpers.keys import make_keyset
    from tests.provider.test_vllm import write_bundle
    from verifier.engine.profile import default_profile
    from verifier.lm import cache_dir, load_model

    load_model("smollm2")
    profile = default_profile()
    os.environ.update(write_bundle(Path(tempfile.mkdtemp()), profile, make_keyset(profile)))
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(cache_dir("smollm2")), dtype="float32", max_model_len=512, max_num_seqs=max(8, a.batch),
              enforce_eager=True, seed=0)
    prompts = [f"Write a short story about item number {i}." for i in range(a.batch)]

    def params(marked: bool):
        return [SamplingParams(temperature=1.0, top_k=a.top_k, top_p=a.top_p, max_tokens=a.tokens,
                               min_tokens=a.tokens, ignore_eos=True,
                               extra_args={"hero": {"model": i, "user": 7 * i}} if marked else None)
                for i in range(a.batch)]

    def run(marked: bool) -> float:
        t0 = time.perf_counter()
        llm.generate(prompts, params(marked), use_tqdm=False)
        return time.perf_counter() - t0

    run(False)
    run(True)
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(a.reps):
        for marked in ((False, True) if r % 2 == 0 else (True, False)):
            times[marked].append(run(marked))
    n = a.batch * a.tokens
    plain, hero = statistics.median(times[False]), statistics.median(times[True])
    print(json.dumps({"bench": "vllm", "batch": a.batch, "tokens": a.tokens, "reps": a.reps, "top_k": a.top_k,
                      "top_p": a.top_p, "plain_tokens_per_s": n / plain, "hero_tokens_per_s": n / hero,
                      "overhead_pct": 100 * (hero / plain - 1), "overhead_pct_best":
                      100 * (min(times[True]) / min(times[False]) - 1),
                      "plain_s": times[False], "hero_s": times[True]}))


if __name__ == "__main__":
    main()
