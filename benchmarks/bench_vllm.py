"""vLLM throughput with the HeRo plugin watermarking every request vs the same engine with no payloads.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python benchmarks/bench_vllm.py [--batch 16] [--tokens 64]
        [--reps 5] [--profile default] [--timers]
    (VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind; scripts/test-vllm sets them)

One engine (the plugin is loaded through the entry point either way); each round runs the plain batch and the
watermarked batch back to back, the order alternating (A, B, then B, A), so load drift on a shared machine hits
both alike. With VLLM_ENABLE_V1_MULTIPROCESSING=0 the engine runs in this process, so its CPU time is this
process's (time.process_time); the figure to read on a shared host is the paired CPU overhead (each round's
watermarked batch over the plain batch beside it: median and a distribution-free 95 % interval). `--timers` also
times the plugin's own calls (`update_state`, `apply`, and inside `apply` the warp and the fused step) in the
watermarked runs, to say where its time goes. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")


class Timers:
    """Wall and calling-thread CPU seconds spent in wrapped functions while `on` (the watermarked runs only). The
    thread's CPU time is the plugin's whole CPU cost when the step runs on one thread (OMP_NUM_THREADS=1)."""

    def __init__(self) -> None:
        self.on = False
        self.total: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner: type, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def timed(*args, **kwargs):
            if not self.on:
                return fn(*args, **kwargs)
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[name] += time.perf_counter() - t0
                self.cpu[name] += time.thread_time() - c0
                self.calls[name] += 1

        setattr(owner, attr, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5, help="rounds (each: one plain and one watermarked batch)")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--profile", default="default", help="the bundle's profile (name or YAML path; SmolLM2's vocab)")
    ap.add_argument("--timers", action="store_true", help="time the plugin's calls in the watermarked runs")
    a = ap.parse_args()

    from _common import vllm_bundle_env

    from verifier.base.timing import load_average, median_interval
    from verifier.cli.bench_figures import bench_payloads
    from verifier.engine.profile import resolve_profile
    from verifier.lm import cache_dir, load_model

    load_model("smollm2")
    profile = resolve_profile(a.profile)
    os.environ.update(vllm_bundle_env(Path(tempfile.mkdtemp(prefix="hero-vllm-bench-")), profile))
    timers = Timers()
    if a.timers:
        from gpu.step import FusedSampler
        from verifier.provider import vllm as plugin
        from verifier.provider.step import RequestSlots

        timers.wrap(plugin.HeroV1LogitsProcessor, "update_state", "update_state")
        timers.wrap(plugin.HeroV1LogitsProcessor, "apply", "apply")
        timers.wrap(RequestSlots, "warp", "apply.warp")
        timers.wrap(RequestSlots, "draw", "apply.draw")
        timers.wrap(FusedSampler, "step", "apply.draw.step")
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(cache_dir("smollm2")), dtype="float32", max_model_len=512, max_num_seqs=max(8, a.batch),
              enforce_eager=True, seed=0)
    prompts = [f"Write a short story about item number {i}." for i in range(a.batch)]
    payloads = bench_payloads(profile, a.batch)

    def params(marked: bool):
        return [SamplingParams(temperature=1.0, top_k=a.top_k, top_p=a.top_p, max_tokens=a.tokens,
                               min_tokens=a.tokens, ignore_eos=True,
                               extra_args={"hero": payloads[i]} if marked else None)
                for i in range(a.batch)]

    def run(marked: bool) -> tuple[float, float]:
        timers.on = marked
        t0, c0 = time.perf_counter(), time.process_time()
        llm.generate(prompts, params(marked), use_tqdm=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        timers.on = False
        return wall, cpu

    load_before = load_average()
    run(False)
    run(True)
    timers.total.clear()
    timers.cpu.clear()
    timers.calls.clear()
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for r in range(a.reps):
        for marked in ((False, True) if r % 2 == 0 else (True, False)):
            w, c = run(marked)
            wall[marked].append(w)
            cpu[marked].append(c)
    n = a.batch * a.tokens
    plain, hero = statistics.median(wall[False]), statistics.median(wall[True])

    def paired(series: dict[bool, list[float]]) -> dict:
        iv = median_interval([100 * (h / p - 1) for h, p in zip(series[True], series[False], strict=True)])
        return {k: (round(v, 3) if k != "n" else v) for k, v in iv.items()}

    out = {"bench": "vllm", "profile": profile.name, "spec_version": profile.spec_version, "batch": a.batch,
           "tokens": a.tokens, "reps": a.reps, "top_k": a.top_k, "top_p": a.top_p,
           "plain_tokens_per_s": n / plain, "hero_tokens_per_s": n / hero,
           "overhead_pct": 100 * (hero / plain - 1),
           "overhead_pct_best": 100 * (min(wall[True]) / min(wall[False]) - 1),
           "overhead_pct_paired_wall": paired(wall), "overhead_pct_paired_cpu": paired(cpu),
           "plain_cpu_s": statistics.median(cpu[False]), "hero_cpu_s": statistics.median(cpu[True]),
           "plain_s": wall[False], "hero_s": wall[True], "plain_cpu_s_each": cpu[False], "hero_cpu_s_each": cpu[True],
           "load_average": {"before": load_before, "after": load_average()}}
    if a.timers:
        # (a recursive call, e.g. the step under a gated opening, is counted at each depth: read the outermost)
        total_hero, cpu_plain = sum(wall[True]), sum(cpu[False])
        calls = timers.calls
        out["plugin_timers"] = {name: {"s": round(s, 4), "cpu_s": round(timers.cpu[name], 4), "calls": calls[name],
                                       "ms_per_call": round(1000 * s / max(1, calls[name]), 4),
                                       "cpu_ms_per_call": round(1000 * timers.cpu[name] / max(1, calls[name]), 4),
                                       "share_of_hero_wall": round(s / total_hero, 4),
                                       # the plugin's CPU over the plain runs' whole process CPU (same count of runs)
                                       "cpu_over_plain_cpu": round(timers.cpu[name] / cpu_plain, 4)}
                                for name, s in sorted(timers.total.items())}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
