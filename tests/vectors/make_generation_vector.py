"""Records the tokens every generation path draws for fixed keys, logits and generator seeds.

`python tests/vectors/make_generation_vector.py OUT.json` writes them (tests/vectors/generation_paths.json was
made at commit 2e5a1fd, before every path ran the fused step); `tests/provider/test_generation_paths.py` replays the
same inputs through today's code with `run_all()` and compares. Runs without vLLM (a stand-in for the three
vLLM names the plugin imports) and without a downloaded model (a one-layer Llama with seeded weights).

Paths: `engine` (HeroLogitsProcessor: `hero generate`, SDK `logits_processor`), `bundle_sampler`
(`BundleSampler.step`), `hf_config` (`HeroWatermarkingConfig`'s processor), `vllm_v1` (the plugin's legacy
runner: a plain row, a warped row, a resumed request and a swap), `generate` (`generate_watermarked` through
`model.generate`), `generate_hf` (`model.generate(watermarking_config=HeroWatermarkingConfig(...))`).
"""

from __future__ import annotations

import enum
import json
import sys
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import torch

PROFILES = ("v1", "default", "v3")
PAYLOADS = [{"model": 37, "user": 1234}, {"model": 200, "user": 7}, {"model": 1, "user": 4095}]
STEPS = 24
SEED = 11


def fixed_keyset(profile):
    from verifier.engine.keys import KeySet, derive_level_table

    return KeySet(tuple(derive_level_table(bytes([lv]) * 32, profile, lv, f"l{lv}-v1")
                        for lv in range(1, profile.depth + 1)))


def opened_bundle(profile, keyset):
    """An opened bundle for `keyset` (built directly: the sealed formats are not what this records)."""
    from verifier.provider.bundle import GenerationBundle

    now = datetime.now(UTC).replace(microsecond=0)
    return GenerationBundle(profile, keyset, {t.level: t.version for t in keyset.tables}, "g" * 32, "acme", "t",
                            now, now + timedelta(hours=1), {})


def logits_at(step: int, rows: int, vocab: int) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1000 + step)) * 3


def prompt(rows: int, vocab: int, length: int = 5) -> torch.Tensor:
    return torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(7))


def drive(processor, profile) -> list[list[int]]:
    """A `LogitsProcessor` called as `model.generate` calls it; the one-hot rows it returns are the tokens."""
    seq = prompt(len(PAYLOADS), profile.vocab_size)
    for t in range(STEPS):
        out = processor(seq, logits_at(t, len(PAYLOADS), profile.vocab_size))
        seq = torch.cat([seq, out.argmax(dim=1, keepdim=True)], dim=1)
    return seq[:, 5:].tolist()


def engine_path(profile, keyset) -> list[list[int]]:
    from verifier.provider.generation import HeroLogitsProcessor

    return drive(HeroLogitsProcessor(profile, keyset, PAYLOADS, generator=torch.Generator().manual_seed(SEED)),
                 profile)


def hf_path(profile, keyset) -> list[list[int]]:
    from verifier.provider import HeroWatermarkingConfig

    cfg = HeroWatermarkingConfig(opened_bundle(profile, keyset), PAYLOADS,
                                 generator=torch.Generator().manual_seed(SEED))
    return drive(cfg.construct_processor(profile.vocab_size, "cpu"), profile)


def bundle_sampler_path(profile, keyset) -> list[list[int]]:
    from verifier.provider import BundleSampler, RequestState

    sampler = BundleSampler(opened_bundle(profile, keyset))
    pay = torch.stack([sampler.payload(p) for p in PAYLOADS])
    states = [RequestState() for _ in PAYLOADS]
    gen = torch.Generator().manual_seed(SEED)
    seq = prompt(len(PAYLOADS), profile.vocab_size)
    h = profile.context_width
    for t in range(STEPS):
        tok = sampler.step(logits_at(t, len(PAYLOADS), profile.vocab_size), seq[:, -h:], pay, states, gen)
        seq = torch.cat([seq, tok[:, None]], dim=1)
    return seq[:, 5:].tolist()


class _Move(enum.Enum):
    UNIDIRECTIONAL = 0
    SWAP = 1


def fake_vllm() -> dict[str, types.ModuleType]:
    """The three names `verifier.provider.vllm` imports from vLLM (no MRV2 module: the legacy runner only)."""
    mods = {n: types.ModuleType(n) for n in ("vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.logits_processor")}
    lp = mods["vllm.v1.sample.logits_processor"]
    lp.BatchUpdate = SimpleNamespace
    lp.MoveDirectionality = _Move
    lp.LogitsProcessor = type("LogitsProcessor", (), {})
    return mods


class _Keys:
    def __init__(self, bundle) -> None:
        self._bundle = bundle

    def bundle(self):
        return self._bundle


def vllm_path(profile, keyset) -> list[list[int]]:
    """The legacy runner's processor over a fake batch: rows 0-1 watermarked (row 1 at T 0.8, top-k 50, top-p 0.9),
    row 2 plain; at step 6 row 3 joins as a resumed request (4 output ids already drawn); at step 9 rows 0 and 1
    swap. Output: each request's output ids (a plain row's are the argmax of its logits)."""
    old_mods = {n: sys.modules.get(n) for n in fake_vllm()}
    if old_mods["vllm"] is None:
        sys.modules.update(fake_vllm())
    sys.modules.pop("verifier.provider.vllm", None)
    try:
        from verifier.provider import vllm as plugin

        plugin._KEYS = _Keys(opened_bundle(profile, keyset))  # what keys() returns once set
        return _vllm_batch(plugin, profile)
    finally:
        plugin.reset_keys()
        sys.modules.pop("verifier.provider.vllm", None)
        for n, m in old_mods.items():
            if m is None:
                sys.modules.pop(n, None)


def _params(fields, temperature=1.0, top_k=0, top_p=1.0):
    return SimpleNamespace(temperature=temperature, top_k=top_k, top_p=top_p, min_p=0.0,
                           extra_args={"hero": fields} if fields else None)


def _vllm_batch(plugin, profile) -> list[list[int]]:
    v = profile.vocab_size
    cfg = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=4), speculative_config=None)
    proc = plugin.HeroLogitsProcessor(cfg, torch.device("cpu"), False)
    proc.slots.generator = torch.Generator().manual_seed(SEED)  # the seam draws with its generator
    prompts = prompt(4, v).tolist()
    outputs: list[list[int]] = [[], [], [], [int(x) for x in prompt(1, v, 4)[0] + 3]]
    rows = [0, 1, 2]  # request index per batch row
    params = [_params(PAYLOADS[0]), _params(PAYLOADS[1], 0.8, 50, 0.9), _params(None), _params(PAYLOADS[2])]
    proc.update_state(SimpleNamespace(removed=[], moved=[], added=[(i, params[i], prompts[i], outputs[i])
                                                                   for i in rows]))
    for t in range(STEPS):
        if t == 6:
            rows.append(3)
            proc.update_state(SimpleNamespace(removed=[], moved=[], added=[(3, params[3], prompts[3], outputs[3])]))
        elif t == 9:
            rows[0], rows[1] = rows[1], rows[0]
            proc.update_state(SimpleNamespace(removed=[], added=[], moved=[(0, 1, _Move.SWAP)]))
        else:
            proc.update_state(None)
        out = proc.apply(logits_at(t, len(rows), v))
        for row, req in enumerate(rows):
            outputs[req].append(int(out[row].argmax()))
    return outputs


class _Tokenizer:
    """Prompts are written as space-separated ids; left padding with id 0 (as the SmolLM2 tokenizer's)."""

    pad_token_id = 0
    eos_token_id = 1

    def __call__(self, texts, return_tensors=None, padding=False, add_special_tokens=False):
        from transformers import BatchEncoding

        ids = [[int(x) for x in s.split()] for s in texts]
        width = max(len(x) for x in ids)
        pad = [[0] * (width - len(x)) + x for x in ids]
        mask = [[0] * (width - len(x)) + [1] * len(x) for x in ids]
        return BatchEncoding({"input_ids": torch.tensor(pad), "attention_mask": torch.tensor(mask)})

    def decode(self, ids, skip_special_tokens=True) -> str:
        return " ".join(str(i) for i in ids)


def tiny_model(vocab: int):
    """A one-layer Llama with weights drawn from a seeded generator (no download; any transformers version)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      pad_token_id=0, bos_token_id=2, eos_token_id=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def generate_path(profile, keyset, model=None) -> list[list[int]]:
    from verifier.provider.generation import generate_watermarked

    model = model or tiny_model(profile.vocab_size)
    gens = generate_watermarked(model, _Tokenizer(), _prompts(profile), PAYLOADS, profile, keyset, max_new_tokens=STEPS,
                                min_new_tokens=STEPS, generator=torch.Generator().manual_seed(SEED))
    return [g.token_ids for g in gens]


def _prompts(profile) -> list[str]:
    prompts = [" ".join(str(int(x)) for x in row) for row in prompt(len(PAYLOADS), profile.vocab_size)]
    prompts[1] = " ".join(prompts[1].split()[2:])  # a shorter prompt: a left-padded row
    return prompts


def generate_hf_path(profile, keyset, model=None) -> list[list[int]]:
    """`model.generate(watermarking_config=HeroWatermarkingConfig(...))` on the same model, prompts and seed."""
    from verifier.provider import HeroWatermarkingConfig

    model = model or tiny_model(profile.vocab_size)
    tok = _Tokenizer()
    enc = tok(_prompts(profile))
    cfg = HeroWatermarkingConfig(opened_bundle(profile, keyset), PAYLOADS,
                                 generator=torch.Generator().manual_seed(SEED))
    with torch.no_grad():
        out = model.generate(**enc, watermarking_config=cfg, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=STEPS, min_new_tokens=STEPS, pad_token_id=tok.pad_token_id)
    return out[:, enc["input_ids"].shape[1]:].tolist()


PATHS = {"engine": engine_path, "bundle_sampler": bundle_sampler_path, "hf_config": hf_path, "vllm_v1": vllm_path,
         "generate": generate_path, "generate_hf": generate_hf_path}


def run_all(paths=PATHS) -> dict[str, dict[str, list[list[int]]]]:
    from verifier.engine.profile import resolve_profile

    out: dict[str, dict[str, list[list[int]]]] = {}
    for name in PROFILES:
        profile = resolve_profile(name)
        keyset = fixed_keyset(profile)
        out[name] = {path: fn(profile, keyset) for path, fn in paths.items()}
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    Path(sys.argv[1]).write_text(json.dumps(run_all(), indent=None) + "\n")
