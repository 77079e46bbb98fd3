"""Gemma-3-270M (V = 262,144, the `gemma3-270m` built-in) end to end on a deployment's own spec v4 profile written by
`hero profile new gemma --from v4 --tokenizer gemma3-270m`: SDK generation (`generate`, what `hero generate` runs)
decodes to the exact users model-free (through the verifier's tokenizer path, fingerprint checked) and model-aware;
`HeroWatermarkingConfig` with `model.generate` does too; the C and torch steps and the reference draw the same
tokens on the model's own logits.

The shipped GGUF is the base model (no chat template), so the chat prompts are written in Gemma's turn markup by
hand, `<bos>` first (`generate` tokenizes without special tokens, as for a chat template's text). Sampling is the
full distribution at T = 1 with one fixed key set (tests/helpers/keys.fixed_keyset), so the texts are the same
every run on one machine. The margin is wide: with fresh keys, three such 160-token answers had 151-155 distinct
scored contexts and user-level p-values of 1e-39 to 1e-75 (2026-11-29). Without `<bos>` the base model wrote
repetitive junk (9-46 distinct contexts in 128 tokens) and 4 of 6 texts missed their exact user.

The model is loaded once for the module and run on one torch thread: on the shared 2-core box, with other
processes busy, two threads waited on each other (a decode step of batch 3 took 3-7 s with 2 threads and 0.43 s
with one, 2026-11-29). The module took 25 minutes there while three evaluations ran at a higher priority; about
3.5 minutes is expected on a quiet box (160 steps of 0.45 s forward + 0.1 s watermark step, twice).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.keys import fixed_keyset
from tests.provider.test_sdk import _bundle
from verifier.engine import reference as R
from verifier.engine.decoder import Decoder
from verifier.engine.fused import make_fused_sampler
from verifier.engine.payload import encode_payload

pytestmark = [pytest.mark.slow, pytest.mark.model]

V = 262_144  # verifier.lm.VOCAB_SIZES["gemma3-270m"]
SMOLLM2_V = 49_152
TOKENS = 160
TURN = "<bos><start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"
QUESTIONS = ["Explain why the sky is blue.", "Give me a recipe for a quick weeknight dinner.",
             "Describe the rules of chess simply."]
PAYLOADS = [{"model": 1, "user": 1234}, {"model": 3, "user": 7}, {"model": 0, "user": 4095}]


@pytest.fixture(scope="module")
def gemma():
    from verifier.lm import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield load_model("gemma3-270m")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """(profile, keyset, bundle): `hero profile new` into a fresh HERO_PROFILES_DIR, one fixed key set."""
    from verifier.cli import main
    from verifier.engine.profile import resolve_profile
    from verifier.lm import cache_root

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HERO_MODEL_CACHE", str(cache_root()))
        mp.setenv("HERO_HOME", str(tmp_path_factory.mktemp("hero")))
        mp.setenv("HERO_PROFILES_DIR", str(tmp_path_factory.mktemp("profiles")))
        assert main(["profile", "new", "gemma", "--from", "v4", "--tokenizer", "gemma3-270m"]) == 0
        profile = resolve_profile("gemma")
    assert (profile.vocab_size, profile.spec_version, profile.tokenizer) == (V, 4, "gemma3-270m")
    assert profile.tokenizer_fingerprint is not None
    keyset = fixed_keyset(profile, label="gemma-end-to-end")
    return profile, keyset, _bundle(profile, keyset)[1]


@pytest.fixture(scope="module")
def generated(gemma, deployment):
    from verifier.provider import generate

    model, tok = gemma
    _, _, bundle = deployment
    return generate(model, tok, bundle, [TURN.format(q) for q in QUESTIONS], PAYLOADS, max_new_tokens=TOKENS,
                    min_new_tokens=TOKENS, temperature=1.0, generator=torch.Generator().manual_seed(0))


def _decoder(deployment) -> Decoder:
    profile, keyset, _ = deployment
    return Decoder(profile, {t.level: [t] for t in keyset.tables})


def _verifier_tokenizer(profile):
    """What `hero decode` and the service read a text with: tokenizer.json alone, checked against the profile."""
    from verifier.lm import TokenizerCache, decode_tokenizer

    return TokenizerCache(decode_tokenizer).for_profile(profile)


def _assert_exact(results, payloads) -> None:
    for r, p in zip(results, payloads, strict=True):
        assert r.watermarked, r
        assert r.levels[1].status == "decoded" and r.levels[1].fields["user"] == p["user"], r
        # the public level (4 issued model ids searched) may stay absent on a short text, never name another
        assert r.levels[0].status != "decoded" or r.levels[0].fields["model"] == p["model"], r


def test_sdk_generation_decodes_to_the_exact_users(deployment, generated):
    ids = [t for g in generated for t in g.token_ids]
    assert max(ids) >= SMOLLM2_V, "no token beyond SmolLM2's vocabulary: not Gemma's width"
    assert all(len(g.token_ids) == TOKENS for g in generated)
    results = _decoder(deployment).decode_texts([g.text for g in generated], _verifier_tokenizer(deployment[0]))
    _assert_exact(results, PAYLOADS)


def test_model_aware_decoding_names_the_same_users(gemma, deployment, generated):
    from verifier.verify.scoring import model_aware_scorer

    scorer = model_aware_scorer(True, "cpu")
    results = scorer.decode_texts(_decoder(deployment), [g.text for g in generated], _verifier_tokenizer(deployment[0]))
    _assert_exact(results, PAYLOADS)


def test_watermarking_config_with_model_generate_decodes_to_the_exact_users(gemma, deployment):
    from verifier.provider import HeroWatermarkingConfig

    model, tok = gemma
    _, _, bundle = deployment
    payloads = [{"model": 2, "user": 321}, {"model": 1, "user": 3000}]
    prompts = [TURN.format(q) for q in QUESTIONS[:2]]
    cfg = HeroWatermarkingConfig(bundle, payloads, generator=torch.Generator().manual_seed(1))
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, watermarking_config=cfg, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=TOKENS, min_new_tokens=TOKENS, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    _assert_exact(_decoder(deployment).decode_texts(texts, _verifier_tokenizer(deployment[0])), payloads)


def _softmax(row: torch.Tensor) -> list[float]:
    return torch.softmax(row.double(), dim=-1).tolist()


def test_every_cpu_step_backend_draws_the_same_tokens_on_gemmas_logits(gemma, deployment, generated):
    """The model's next-token logits at a few positions of the generated texts (real distributions over 262,144
    ids): the C step (when built), the torch step and the reference `hero_sample` draw the same token per row, in
    float32 and float64."""
    from gpu import cpu_kernel

    model, _ = gemma
    profile, keyset, _ = deployment
    h = profile.context_width
    rows, ctx, pay = [], [], []
    with torch.no_grad():
        for g, p in zip(generated, PAYLOADS, strict=True):
            ids = torch.tensor([g.token_ids])
            logits = model(input_ids=ids).logits[0]
            for t in (h + 7, TOKENS // 2, TOKENS - 1):
                rows.append(logits[t])
                ctx.append(g.token_ids[t - h + 1: t + 1])
                pay.append(encode_payload(profile, p))
    logits = torch.stack(rows).double()
    assert logits.shape == (9, V)
    contexts, payload = torch.tensor(ctx), torch.tensor(pay)
    want = []
    for r in range(len(rows)):
        seg = R.position(R.prf_seed(keyset.position, ctx[r]), profile.segments)
        keys = [t.entries[pay[r][seg][lv]] for lv, t in enumerate(keyset.tables)]
        want.append(R.hero_sample(_softmax(logits[r]), profile.schedule, keys, ctx[r], profile.routing_stride,
                                  seed_keys=[t.level_key for t in keyset.tables]))
    fs = make_fused_sampler(profile, keyset)
    backends = ["torch"] + (["native"] if cpu_kernel.available() and hasattr(cpu_kernel.load(), "sample_step")
                            else [])
    for backend in backends:
        for dtype in (torch.float64, torch.float32):
            generated_ = torch.full((len(rows),), h + 5, dtype=torch.int64)
            tokens, marks = fs.step(logits.to(dtype), contexts, payload, generated_, fs.new_log(len(rows)),
                                    backend=backend, with_marks=True)
            assert bool(marks.all())
            assert tokens.tolist() == want, (backend, dtype)
