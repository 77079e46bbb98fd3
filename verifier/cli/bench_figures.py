"""What `hero bench decode|generate|serve` measures, and the inputs a figure runs on.

The figure builders live beside the command, not in verifier/cli/bench.py (which only wires the arguments), so
that the scripts under benchmarks/ and the CLI print the same figures (benchmarks/bench_decode.py,
bench_generate.py and scripts/gpu-check call them). They stay in the entry layer because each one puts gpu,
engine, lm and the provider SDK together with fresh random keys, which only an entry point may import; the
statistics they report are verifier.base.timing's. Also here, because `hero bench serve` needs them as much as the
service benchmarks do: the BBC texts, the loopback port and the private PostgreSQL schema a served figure runs on.
Times are wall-clock; each figure comes with min/median/max over the repetitions. `generate_overhead_figures`
also times the process's CPU (time.process_time: every thread of this process, none of the others), because on a
shared 2-core host the wall time of one run moves with the other processes' load, and reports each ratio's median
over alternated rounds with a distribution-free 95 % interval and the load average.
"""

from __future__ import annotations

import socket
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager

from verifier.base.timing import load_average, median_interval, summary, timed

RANDOM_MODEL = "random-smollm2"
TOKENS_PER_TEXT = 220  # a BBC text cut to about this many tokens: a typical verify request's text


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


# -- what a served figure runs on -----------------------------------------------------------------------
def bench_texts(tokenizer, n: int, tokens: int = TOKENS_PER_TEXT) -> list[str]:
    """n BBC news texts cut to ~`tokens` tokens (decoded back from the ids, so the verifier sees as many)."""
    from hero_eval.corpus import bbc_articles

    out = []
    for art in bbc_articles():
        ids = tokenizer(art.text, add_special_tokens=False)["input_ids"]
        if len(ids) >= tokens:
            out.append(tokenizer.decode(ids[:tokens]).strip())
        if len(out) == n:
            return out
    raise RuntimeError("not enough long articles in the corpus")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server a benchmark starts (the OS picks it: no clash between runs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def pg_schema(url: str):
    """A private schema on the given PostgreSQL (dropped afterwards), as a URL whose search_path is it."""
    from sqlalchemy import create_engine, text

    schema = f"hero_bench_{uuid.uuid4().hex[:12]}"
    engine = create_engine(url)
    try:
        with engine.begin() as c:
            c.execute(text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in url else "?"
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()
