"""`hero bench decode|generate`: throughput figures as one JSON line (see docs/performance.md).

The measuring functions live here so that the scripts under benchmarks/ and the CLI print the same
figures. Times are wall-clock; each figure comes with min/median/max over the repetitions. `hero bench generate`
also times the process's CPU (time.process_time: every thread of this process, none of the others), because on a
shared 2-core host the wall time of one run moves with the other processes' load, and reports each ratio's median
over alternated rounds with a distribution-free 95 % interval (`median_interval`) and the load average.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

from verifier.cli.common import emit

RANDOM_MODEL = "random-smollm2"
MIN_REPS = 3  # fewer repetitions: a median of one or two runs on a loaded machine is noise


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure decode / generation throughput (prints one JSON line)")
    bsub = p.add_subparsers(dest="bench_command", required=True)
    d = bsub.add_parser("decode", help="evidence kernel throughput: fast path vs pure torch path")
    d.add_argument("--batch", type=int, default=64)
    d.add_argument("--tokens", type=int, default=200)
    d.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    d.add_argument("--reps", type=int, default=20)
    d.add_argument("--torch-reps", type=int, default=3, help="repetitions of the (slow) torch path; 0 = skip")
    d.add_argument("--profile", default=None,
                   help="profile name or YAML path (default: the deployment's profile rule: HERO_PROFILE, else the "
                        "profile of this deployment's keys, else the new-deployment profile)")
    d.add_argument("--levels", type=int, default=0,
                   help="levels decoded: 1 = moderator (public level), 0 = all levels (auditor)")
    d.set_defaults(handler=cmd_decode)
    g = bsub.add_parser("generate", help="watermark overhead in model.generate over plain sampling")
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--tokens", type=int, default=32, help="new tokens per row")
    g.add_argument("--reps", type=int, default=3, help="rounds; each runs every variant once, the order rotating")
    g.add_argument("--model", default=None,
                   help=f"a built-in model, a local directory, a hub id, or {RANDOM_MODEL} (random weights); "
                        "default: the first profile's tokenizer (its model)")
    g.add_argument("--profile", nargs="+", default=None, metavar="PROFILE",
                   help="profile(s) to watermark with (name or YAML path), each a variant in the same rounds; "
                        "the first is `hero`, the others `hero-NAME`; all must share the model's vocabulary "
                        "(default: the deployment's profile rule, as `hero generate`)")
    g.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    g.add_argument("--path", choices=["fused", "engine"], default="fused",
                   help="fused: HeroWatermarkingConfig (transformers' warpers on); engine: HeroLogitsProcessor")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--synthid", action="store_true", help="also time transformers' SynthID in the same pairs")
    g.add_argument("--exact-step", action="store_true",
                   help="also time HeRo with the C step's exact path only (no fast path) in the same pairs")
    g.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    g.set_defaults(handler=cmd_generate)
    from verifier.cli import bench_serve  # its own module: `hero bench serve`

    bench_serve.register(bsub)


def summary(times: list[float]) -> dict[str, float]:
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def median_interval(xs: list[float], level: float = 0.95) -> dict[str, float]:
    """The median of `xs` and a distribution-free interval for it: order statistics x_(k) .. x_(n+1-k), the
    widest k whose binomial coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= `level` (with too few rounds for
    `level`, min .. max and the coverage that has). Rounds of a shared machine are not normal; this needs no
    assumption beyond independent rounds."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("no values")
    tail, k, coverage = 0.0, 1, 1.0 - 2.0 * 0.5 ** n
    for j in range(1, (n + 1) // 2 + 1):  # coverage of [x_(j), x_(n+1-j)] = 1 - 2 P(Bin <= j - 1)
        tail += math.comb(n, j - 1) * 0.5 ** n
        cov = 1.0 - 2.0 * tail
        if cov < level:
            break
        k, coverage = j, cov
    return {"median": statistics.median(s), "lo": s[k - 1], "hi": s[n - k], "coverage": coverage, "n": n}


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none): how busy the machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def bench_payloads(profile, batch: int) -> list[dict[str, int]]:
    """One valid payload per row under `profile`: a spec v4 level's issued values in turn, else values spread
    over the level's range; each level's whole value split into its fields, first most significant."""
    out = []
    for i in range(batch):
        fields: dict[str, int] = {}
        for li, level in enumerate(profile.levels):
            whole = level.issued[i % len(level.issued)] if level.issued is not None \
                else (7 * i + li) % (1 << level.value_bits)
            for f in reversed(level.fields):
                fields[f.name] = whole & ((1 << f.bits) - 1)
                whole >>= f.bits
        out.append(fields)
    return out


def warn_few_reps(reps: int, flag: str = "--reps") -> str | None:
    """A warning (printed to stderr, and returned for the JSON line) when a figure rests on < MIN_REPS runs."""
    if reps >= MIN_REPS:
        return None
    msg = f"only {reps} repetition(s) ({flag} {reps}): the figures are not reliable; use {flag} {MIN_REPS} or more"
    print(f"hero: warning: {msg}", file=sys.stderr)
    return msg


def timed(fn: Callable[[], object], reps: int, warmup: int = 1, sync: bool = False) -> list[float]:
    import torch

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def decode_problem(batch: int, tokens: int, device: str = "cpu", seed: int = 0, profile=None, levels: int = 0):
    """Random ids for `profile` (default: the shipped default) and fresh tables for levels 1..levels."""
    import torch

    from gpu import prf
    from gpu.scoring import LevelKeys, ScoringSpec
    from verifier.engine.keys import derive_level_table, new_master_secret
    from verifier.engine.profile import default_profile

    profile = profile or default_profile()
    levels = levels or profile.depth
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, profile.vocab_size, (batch, tokens), generator=gen).to(device)
    lengths = torch.full((batch,), tokens, dtype=torch.int64, device=device)
    tables = [derive_level_table(new_master_secret(), profile, lv, "bench") for lv in range(1, levels + 1)]
    pk = prf.key_words([tables[0].position], device)
    kwargs = dict(
        spec=ScoringSpec(profile.context_width, profile.vocab_size, profile.schedule, profile.segments,
                         profile.routing_stride, profile.windows),
        position_key=(pk[0][0], pk[1][0]),
        tables=[
            LevelKeys(t.level, *prf.key_words(list(t.entries), device), per_value=profile.levels[t.level - 1].per_value)
            for t in tables
        ],
    )
    return profile, ids, lengths, kwargs


def decode_figures(batch: int, tokens: int, device: str = "cpu", reps: int = 20, torch_reps: int = 3,
                   profile=None, levels: int = 0) -> dict:
    """Tokens/s of the evidence kernel (levels 1..levels at once) on the selected fast path and on torch."""
    import torch

    from gpu.evidence import segment_scores, select_backend

    profile, ids, lengths, kwargs = decode_problem(batch, tokens, device, profile=profile, levels=levels)
    sync = device == "cuda"
    backend = select_backend(device)
    n = batch * tokens
    fast = timed(lambda: segment_scores(ids, lengths, **kwargs), reps, warmup=2, sync=sync)
    out = {
        "bench": "decode",
        "profile": profile.name,
        "spec_version": profile.spec_version,
        "label": profile.label(),
        "levels": len(kwargs["tables"]),
        "candidates": [t.candidates for t in kwargs["tables"]],
        "device": device,
        "device_name": torch.cuda.get_device_name() if sync else None,
        "backend": backend,
        "threads": torch.get_num_threads(),
        "batch": batch,
        "tokens": tokens,
        "tokens_per_s": n / statistics.median(fast),
        "tokens_per_s_best": n / min(fast),
        "seconds": summary(fast),
    }
    if torch_reps > 0:
        slow = timed(lambda: segment_scores(ids, lengths, backend="torch", **kwargs), torch_reps, sync=sync)
        out["torch_tokens_per_s"] = n / statistics.median(slow)
        out["torch_seconds"] = summary(slow)
        out["speedup_vs_torch"] = statistics.median(slow) / statistics.median(fast)
    return out


def sampler_figures(vocab: int, batch: int = 1, reps: int = 50, device: str = "cpu") -> dict:
    """One HeroSampler.sample step (positions, seeds, routing, Gumbel-max) vs softmax + multinomial."""
    import torch

    from gpu.sampler import HeroSampler
    from verifier.engine.keys import derive_level_table, new_master_secret
    from verifier.engine.profile import make_profile

    profile = make_profile((2, 2), 24, vocab, spec_version=2)
    tables = [derive_level_table(new_master_secret(), profile, lv, "bench") for lv in (1, 2)]
    sampler = HeroSampler(profile.schedule, profile.segments, [list(t.entries) for t in tables],
                          tables[0].position, device)
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(batch, vocab, generator=gen) * 3).to(device)
    context = torch.randint(0, vocab, (batch, profile.context_width), generator=gen).to(device)
    payload = torch.randint(0, 4, (batch, profile.segments, 2), generator=gen)
    payload[:, :, 1] = torch.randint(0, 4096, (batch, 1), generator=gen)  # level 2: one whole 12-bit value
    payload = payload.to(device)
    sync = device == "cuda"
    hero = timed(lambda: sampler.sample(logits, context, payload), reps, warmup=3, sync=sync)
    plain = timed(lambda: torch.multinomial(torch.softmax(logits, -1), 1), reps, warmup=3, sync=sync)
    return {"bench": "sampler", "vocab": vocab, "batch": batch, "device": device,
            "hero_step_s": summary(hero), "multinomial_step_s": summary(plain)}


def generate_figures(batch: int, tokens: int = 32, reps: int = 3, model_name: str | None = None,
                     device: str = "cpu", profile=None) -> dict:
    """Wall time of model.generate with the watermark processor vs plain multinomial sampling.

    Both runs force exactly `tokens` new tokens per row (min_new_tokens) and alternate, so load drift
    on a shared machine hits both alike. overhead_pct compares medians.
    """

    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import default_profile
    from verifier.lm import load_model
    from verifier.provider.generation import generate_watermarked

    profile = profile or default_profile()
    model_name = model_name or profile.tokenizer
    model, tokenizer = load_model(model_name, device)
    keyset = KeySet(tuple(derive_level_table(new_master_secret(), profile, lv, "bench")
                          for lv in range(1, profile.depth + 1)))
    prompts = [f"Write a short story about item number {i}." for i in range(batch)]
    payloads = bench_payloads(profile, batch)

    def run(watermark: bool) -> None:
        generate_watermarked(model, tokenizer, prompts, payloads, profile, keyset, max_new_tokens=tokens,
                             min_new_tokens=tokens, watermark=watermark)

    run(True)
    run(False)
    marked, plain = [], []
    for _ in range(reps):
        for wm, dest in ((False, plain), (True, marked)):
            t0 = time.perf_counter()
            run(wm)
            dest.append(time.perf_counter() - t0)
    n = batch * tokens
    return {
        "bench": "generate",
        "model": model_name,
        "profile": profile.name,
        "device": device,
        "batch": batch,
        "tokens": tokens,
        "plain_tokens_per_s": n / statistics.median(plain),
        "hero_tokens_per_s": n / statistics.median(marked),
        "overhead_pct": 100.0 * (statistics.median(marked) / statistics.median(plain) - 1.0),
        "overhead_pct_best": 100.0 * (min(marked) / min(plain) - 1.0),
        "plain_seconds": summary(plain),
        "hero_seconds": summary(marked),
    }


def random_smollm2(device: str = "cpu", dtype: str = "float32"):
    """A SmolLM2-135M-shaped Llama with random weights (no download): the shipped model's compute per step."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device=device, dtype=getattr(torch, dtype)).eval()


def bench_bundle(profile=None):
    """An opened-bundle object with fresh random tables (for benchmarks: nothing sealed, nothing stored)."""
    from datetime import UTC, datetime, timedelta

    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import default_profile
    from verifier.provider.bundle import GenerationBundle

    profile = profile or default_profile()
    keyset = KeySet(tuple(derive_level_table(new_master_secret(), profile, lv, f"l{lv}-bench")
                          for lv in range(1, profile.depth + 1)))
    now = datetime.now(UTC)
    return GenerationBundle(profile=profile, keyset=keyset, key_versions={t.level: t.version for t in keyset.tables},
                            bundle_id="bench", provider_id="bench", etag="bench", issued_at=now,
                            expires_at=now + timedelta(days=1), header={})


def generate_overhead_figures(batch: int, tokens: int = 32, reps: int = 3, model_name: str | None = None,
                              device: str = "cpu", *, top_k: int = 0, top_p: float = 1.0, synthid: bool = False,
                              exact_step: bool = False, dtype: str = "float32", prompt_tokens: int = 16,
                              profiles: list | None = None, threads: int = 0) -> dict:
    """model.generate per step: plain sampling vs HeroWatermarkingConfig (vs SynthID), alternated in one run.

    Same model, same prompt ids, transformers' own top-k/top-p in every variant; each run forces exactly
    `tokens` new tokens (min_new_tokens). Each repetition runs the variants back to back (the order rotates),
    so load drift hits all alike. `profiles` (default: the shipped default): the first is the `hero` variant,
    each further one a `hero-NAME` variant in the same rounds. Wall and process CPU time per step are both
    recorded; `overhead_pct*` read wall time (as before), `cpu` and `wall` give each variant's paired ratio
    to the plain run of its round with a 95 % interval (`median_interval`).
    """
    import torch

    from verifier.engine.profile import default_profile
    from verifier.provider.hf import HeroWatermarkingConfig

    if threads > 0:
        torch.set_num_threads(threads)
    profiles = list(profiles or [default_profile()])
    model_name = model_name or profiles[0].tokenizer
    load_before = load_average()
    if model_name == RANDOM_MODEL:
        model = random_smollm2(device, dtype)
    else:
        from verifier.lm import load_model

        model, _ = load_model(model_name, device, profiles[0].tokenizer_revision
                              if model_name == profiles[0].tokenizer else None)
        model = model.to(getattr(torch, dtype))
    width = model.get_output_embeddings().weight.shape[0]
    for prof in profiles:
        if prof.vocab_size != width:
            raise ValueError(f"profile {prof.name!r} has vocab_size {prof.vocab_size} but model {model_name!r} "
                             f"returns {width} logits: pass a profile on this model's tokenizer (hero profile new)")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, profiles[0].vocab_size, (batch, prompt_tokens), generator=gen).to(device)
    mask = torch.ones_like(ids)
    variants: dict[str, Callable[[], object] | None] = {"plain": None}
    step_cpu: dict[str, list[float]] = {}  # variant -> CPU seconds in the watermark processor, per call (timed runs)
    for i, prof in enumerate(profiles):
        bundle, payloads = bench_bundle(prof), bench_payloads(prof, batch)
        name = "hero" if i == 0 else f"hero-{prof.name}"
        if name in variants:
            raise ValueError(f"profile {prof.name!r} given twice")
        variants[name] = lambda b=bundle, p=payloads, n=name: _TimedConfig(HeroWatermarkingConfig(b, p), n, step_cpu)
    if synthid:
        from transformers import SynthIDTextWatermarkingConfig

        keys = [int(x) for x in torch.randint(0, 1000, (20,), generator=gen)]
        variants["synthid"] = lambda: SynthIDTextWatermarkingConfig(keys=keys, ngram_len=5)
    native = None
    if exact_step:
        from gpu import cpu_kernel

        native = cpu_kernel.load()
        if native is None or device != "cpu":
            raise SystemExit("--exact-step needs the C kernel and --device cpu")
        variants["hero-exact-step"] = variants["hero"]
    sync = device == "cuda"

    def run(name: str) -> tuple[float, float]:
        make = variants[name]
        kw = {"watermarking_config": make()} if make else {}
        if native is not None:
            native.fast_step(name != "hero-exact-step")
        if sync:
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=tokens,
                           min_new_tokens=tokens, top_k=top_k or None, top_p=top_p, temperature=1.0,
                           pad_token_id=0, **kw)
        if sync:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / tokens, (time.process_time() - c0) / tokens

    names = list(variants)
    for name in names:
        run(name)  # warm-up
    step_cpu.clear()
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            wall_s, cpu_s = run(name)
            times[name].append(wall_s)
            cpu[name].append(cpu_s)
    if native is not None:
        native.fast_step(True)
    med = {n: statistics.median(t) for n, t in times.items()}

    def paired(series: dict[str, list[float]], name: str) -> dict[str, float]:
        """Each round's `name` run over the plain run of that round, in percent: median and 95 % interval."""
        iv = median_interval([100.0 * (h / p - 1.0) for h, p in zip(series[name], series["plain"], strict=True)])
        return {k: (round(v, 3) if k != "n" else v) for k, v in iv.items()}

    out = {"bench": "generate", "path": "fused", "model": model_name, "device": device, "dtype": dtype,
           "profile": profiles[0].name, "spec_version": profiles[0].spec_version, "vocab_size": width,
           "threads": torch.get_num_threads(), "batch": batch, "tokens": tokens, "reps": reps, "top_k": top_k,
           "top_p": top_p,
           "plain_ms_per_step": 1000 * med["plain"], "hero_ms_per_step": 1000 * med["hero"],
           "overhead_pct": 100.0 * (med["hero"] / med["plain"] - 1.0),
           "overhead_pct_best": 100.0 * (min(times["hero"]) / min(times["plain"]) - 1.0),
           # each repetition's HeRo run against the plain run beside it: drift between repetitions cancels
           "overhead_pct_paired": 100.0 * (statistics.median(
               h / p for h, p in zip(times["hero"], times["plain"], strict=True)) - 1.0),
           "seconds_per_step": {n: summary(t) for n, t in times.items()},
           "cpu_seconds_per_step": {n: summary(t) for n, t in cpu.items()},
           # per variant: the paired overhead in process CPU time (the figure to read on a shared host) and wall
           "overhead_pct_vs_plain": {n: {"cpu": paired(cpu, n), "wall": paired(times, n)}
                                     for n in names if n != "plain"},
           "load_average": {"before": load_before, "after": load_average()}}
    # direct: the watermark processor's own CPU per step (calling thread: all of it with --threads 1) over the
    # plain run's process CPU per step; far less noisy than the difference of two whole runs on a busy host
    out["processor_cpu"] = {n: {"ms_per_step": round(1000 * statistics.median(c), 4),
                                "pct_of_plain_step": round(100 * statistics.median(c) / statistics.median(cpu["plain"]),
                                                           3)}
                            for n, c in step_cpu.items() if c}
    if exact_step:
        out["exact_step_ms_per_step"] = 1000 * med["hero-exact-step"]
        out["exact_step_overhead_pct"] = 100.0 * (med["hero-exact-step"] / med["plain"] - 1.0)
        out["exact_step_overhead_pct_paired"] = 100.0 * (statistics.median(
            h / p for h, p in zip(times["hero-exact-step"], times["plain"], strict=True)) - 1.0)
    if synthid:
        out["synthid_ms_per_step"] = 1000 * med["synthid"]
        out["synthid_overhead_pct"] = 100.0 * (med["synthid"] / med["plain"] - 1.0)
    if device == "cuda":
        out["device_name"] = torch.cuda.get_device_name()
    return out


class _TimedConfig:
    """A watermarking config whose processor records its calling thread's CPU time per call under `name`."""

    def __init__(self, inner, name: str, sink: dict[str, list[float]]) -> None:
        self._inner, self._name, self._sink = inner, name, sink

    def __getattr__(self, attr: str):
        return getattr(self._inner, attr)

    def __deepcopy__(self, memo):  # transformers copies the generation config on every call
        return self

    def construct_processor(self, vocab_size: int, device=None):
        inner = self._inner.construct_processor(vocab_size, device)
        sink = self._sink.setdefault(self._name, [])

        class Timed(type(inner)):
            def __call__(self, input_ids, scores):
                c0 = time.thread_time()
                try:
                    return super().__call__(input_ids, scores)
                finally:
                    sink.append(time.thread_time() - c0)

        inner.__class__ = Timed
        return inner


def tokenize_figures(batch: int, tokens: int = 200, reps: int = 10, name: str = "smollm2") -> dict:
    """Batched fast-tokenizer throughput (what Decoder.decode_texts calls) vs one text at a time."""
    from verifier.lm import load_tokenizer

    tok = load_tokenizer(name)
    words = "the watermark survives light edits while the verifier reads every token of the text".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(tokens * 3 // 4)) for i in range(batch)]
    n = sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"])
    batched = timed(lambda: tok(texts, add_special_tokens=False)["input_ids"], reps)
    single = timed(lambda: [tok(t, add_special_tokens=False)["input_ids"] for t in texts], reps)
    return {"bench": "tokenize", "batch": batch, "tokens": n, "fast": bool(getattr(tok, "is_fast", False)),
            "batched_tokens_per_s": n / statistics.median(batched),
            "single_tokens_per_s": n / statistics.median(single),
            "batched_seconds": summary(batched), "single_seconds": summary(single)}


def _check(args: argparse.Namespace) -> None:
    import torch

    if not 1 <= args.batch <= 4096 or not 1 <= args.tokens <= 100_000:
        raise ValueError("--batch must be in 1..4096 and --tokens in 1..100000")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device available")


def rule_profile(args: argparse.Namespace) -> str:
    """The profile a bench runs when none is named: the deployment's rule (verifier.keys.deployment), as every
    other command: HERO_PROFILE, else the profile of this deployment's keys, else NEW_DEPLOYMENT_PROFILE. The bench
    draws keys of its own; the store is only asked which profile it holds."""
    from verifier.cli.common import cli_settings, open_database
    from verifier.keys.deployment import deployment_profile

    settings = cli_settings(args)
    if settings.profile:
        return settings.profile
    return deployment_profile(None, open_database(settings))


def cmd_decode(args: argparse.Namespace) -> None:
    from verifier.cli.common import resolve_profile

    _check(args)
    profile = resolve_profile(args.profile or rule_profile(args))
    if not 0 <= args.levels <= profile.depth:
        raise ValueError(f"--levels must be in 0..{profile.depth}")
    warnings = [w for w in (warn_few_reps(max(1, args.reps)),
                            warn_few_reps(args.torch_reps, "--torch-reps") if args.torch_reps > 0 else None) if w]
    out = decode_figures(args.batch, args.tokens, args.device, max(1, args.reps), max(0, args.torch_reps),
                         profile, args.levels)
    emit({**out, "warnings": warnings} if warnings else out)


def cmd_generate(args: argparse.Namespace) -> None:
    from verifier.engine.profile import resolve_profile

    _check(args)
    if not 0 <= args.threads <= 1024:
        raise ValueError("--threads must be in 0..1024")
    names = args.profile or [rule_profile(args)]
    profiles = [resolve_profile(p) for p in names]  # a bad name fails here, before the model loads
    warning = warn_few_reps(max(1, args.reps))
    if args.path == "engine":
        if len(profiles) > 1:
            raise ValueError("--path engine takes one --profile")
        out = generate_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device,
                               profile=profiles[0])
    else:
        out = generate_overhead_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device,
                                        top_k=args.top_k, top_p=args.top_p, synthid=args.synthid, dtype=args.dtype,
                                        exact_step=args.exact_step, profiles=profiles, threads=args.threads)
    emit({**out, "warnings": [warning]} if warning else out)
