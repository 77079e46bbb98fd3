"""`hero bench decode|generate`: throughput figures as one JSON line (see docs/performance.md).

The measuring functions live here so that the scripts under benchmarks/ and the CLI print the same
figures. Times are wall-clock; each figure comes with min/median/max over the repetitions.
"""

from __future__ import annotations

import argparse
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
    d.add_argument("--profile", default="default", help="profile name (default = spec v2; v1) or YAML path")
    d.add_argument("--levels", type=int, default=0,
                   help="levels decoded: 1 = moderator (public level), 0 = all levels (auditor)")
    d.set_defaults(handler=cmd_decode)
    g = bsub.add_parser("generate", help="watermark overhead in model.generate over plain sampling")
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--tokens", type=int, default=32, help="new tokens per row")
    g.add_argument("--reps", type=int, default=3)
    g.add_argument("--model", default="smollm2", help=f"a shipped model, or {RANDOM_MODEL} (random weights)")
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


def generate_figures(batch: int, tokens: int = 32, reps: int = 3, model_name: str = "smollm2",
                     device: str = "cpu") -> dict:
    """Wall time of model.generate with the watermark processor vs plain multinomial sampling.

    Both runs force exactly `tokens` new tokens per row (min_new_tokens) and alternate, so load drift
    on a shared machine hits both alike. overhead_pct compares medians.
    """

    from verifier.engine.generation import generate_watermarked
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.engine.profile import default_profile
    from verifier.lm import load_model

    model, tokenizer = load_model(model_name, device)
    profile = default_profile()
    keyset = KeySet(tuple(derive_level_table(new_master_secret(), profile, lv, "bench") for lv in (1, 2)))
    prompts = [f"Write a short story about item number {i}." for i in range(batch)]
    payloads = [{"model": i % 4096, "user": (7 * i) % 4096} for i in range(batch)]

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


def generate_overhead_figures(batch: int, tokens: int = 32, reps: int = 3, model_name: str = "smollm2",
                              device: str = "cpu", *, top_k: int = 0, top_p: float = 1.0, synthid: bool = False,
                              exact_step: bool = False,
                              dtype: str = "float32", prompt_tokens: int = 16) -> dict:
    """model.generate per step: plain sampling vs HeroWatermarkingConfig (vs SynthID), alternated in one run.

    Same model, same prompt ids, transformers' own top-k/top-p in every variant; each run forces exactly
    `tokens` new tokens (min_new_tokens). Each repetition runs the variants back to back (the order rotates),
    so load drift hits all alike. overhead_pct compares medians of the per-step times.
    """
    import torch

    from verifier.provider.hf import HeroWatermarkingConfig

    if model_name == RANDOM_MODEL:
        model = random_smollm2(device, dtype)
    else:
        from verifier.lm import load_model

        model, _ = load_model(model_name, device)
        model = model.to(getattr(torch, dtype))
    bundle = bench_bundle()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, bundle.profile.vocab_size, (batch, prompt_tokens), generator=gen).to(device)
    mask = torch.ones_like(ids)
    payloads = [{"model": i % 4096, "user": (7 * i) % 4096} for i in range(batch)]
    variants = {"plain": None, "hero": lambda: HeroWatermarkingConfig(bundle, payloads)}
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

    def run(name: str) -> float:
        make = variants[name]
        kw = {"watermarking_config": make()} if make else {}
        if native is not None:
            native.fast_step(name != "hero-exact-step")
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=tokens,
                           min_new_tokens=tokens, top_k=top_k or None, top_p=top_p, temperature=1.0,
                           pad_token_id=0, **kw)
        if sync:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / tokens

    names = list(variants)
    for name in names:
        run(name)  # warm-up
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(run(name))
    if native is not None:
        native.fast_step(True)
    med = {n: statistics.median(t) for n, t in times.items()}
    out = {"bench": "generate", "path": "fused", "model": model_name, "device": device, "dtype": dtype,
           "batch": batch, "tokens": tokens, "reps": reps, "top_k": top_k, "top_p": top_p,
           "plain_ms_per_step": 1000 * med["plain"], "hero_ms_per_step": 1000 * med["hero"],
           "overhead_pct": 100.0 * (med["hero"] / med["plain"] - 1.0),
           "overhead_pct_best": 100.0 * (min(times["hero"]) / min(times["plain"]) - 1.0),
           # each repetition's HeRo run against the plain run beside it: drift between repetitions cancels
           "overhead_pct_paired": 100.0 * (statistics.median(
               h / p for h, p in zip(times["hero"], times["plain"], strict=True)) - 1.0),
           "seconds_per_step": {n: summary(t) for n, t in times.items()}}
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


def cmd_decode(args: argparse.Namespace) -> None:
    from verifier.cli.common import resolve_profile

    _check(args)
    profile = resolve_profile(args.profile)
    if not 0 <= args.levels <= profile.depth:
        raise ValueError(f"--levels must be in 0..{profile.depth}")
    warnings = [w for w in (warn_few_reps(max(1, args.reps)),
                            warn_few_reps(args.torch_reps, "--torch-reps") if args.torch_reps > 0 else None) if w]
    out = decode_figures(args.batch, args.tokens, args.device, max(1, args.reps), max(0, args.torch_reps),
                         profile, args.levels)
    emit({**out, "warnings": warnings} if warnings else out)


def cmd_generate(args: argparse.Namespace) -> None:
    _check(args)
    warning = warn_few_reps(max(1, args.reps))
    if args.path == "engine":
        out = generate_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device)
    else:
        out = generate_overhead_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device,
                                        top_k=args.top_k, top_p=args.top_p, synthid=args.synthid, dtype=args.dtype,
                                        exact_step=args.exact_step)
    emit({**out, "warnings": [warning]} if warning else out)
