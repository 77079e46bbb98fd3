"""Model-aware scoring's cost is bounded through the API (security round 4, HIGH-1): LM-token caps per text and per
request (413 naming the cap, before quota or LM work), quotas in LM tokens, a deadline per decode (503), the
caller's disconnect and SIGTERM stop the LM within seconds, and /readyz reports a decode stuck past its deadline.
The LM is a stand-in (tests/verify/test_scoring.py's FakeLM, or a slow one): these check the service's contract."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.helpers.workers import make_texts
from tests.verify.test_scoring import HUMAN, FakeLM


class SlowLM(FakeLM):
    """FakeLM that takes `delay` seconds per forward pass."""

    def __init__(self, vocab: int, delay: float = 0.3) -> None:
        super().__init__(vocab)
        self.delay = delay

    def forward(self, input_ids, attention_mask=None):
        time.sleep(self.delay)
        return super().forward(input_ids, attention_mask)


@pytest.fixture
def lms(monkeypatch):
    models: dict = {}

    def load_model(name="smollm2", device="cpu"):
        from verifier.lm import VOCAB_SIZES

        models.setdefault(name, models.get("factory", FakeLM)(VOCAB_SIZES[name]))
        return models[name], None

    monkeypatch.setattr("verifier.lm.load_model", load_model)
    return models


def _verify(svc, texts, role="auditor"):
    return svc.client.post("/v1/verify", headers=svc.auth(role), json={"texts": texts})


def test_20000_emoji_are_refused_in_milliseconds_before_the_lm_or_the_quota(make_service, sqlite_url, lms,
                                                                           tmp_path):
    roles = tmp_path / "roles.yaml"
    roles.write_text("roles:\n  auditor:\n    max_level: all\n    actions: [verify]\n"
                     "    limits: {texts_per_minute: 1}\n"
                     "  admin:\n    max_level: all\n    actions: [verify, keys.write, keys.read]\n")
    svc = make_service(sqlite_url, model_aware=True, roles_file=roles)
    svc.init_keys()
    svc.ctx.tokenizers(svc.ctx.profile.tokenizer).encode_ids([HUMAN])  # loaded, as `hero serve` does at start
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    r = _verify(svc, ["\U0001F600" * 20_000])
    took = time.perf_counter() - t0
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == ("text 0 is 60000 tokens long; model-aware scoring reads at most 2048 tokens per text "
                                  "(HERO_MODEL_AWARE_MAX_TOKENS)")
    assert took < 5 and (proc.memory_info().rss - rss0) < 500 * 2**20
    assert "smollm2" not in lms  # the LM was never loaded, let alone run
    assert _verify(svc, ["\U0001F600" * 20_000]).status_code == 413  # not 429: the one text a minute is unspent


def test_the_request_token_cap_and_lm_token_quotas(make_service, sqlite_url, lms, tmp_path):
    roles = tmp_path / "roles.yaml"
    roles.write_text("roles:\n  auditor:\n    max_level: all\n    actions: [verify]\n"
                     "    limits: {lm_tokens_per_minute: 50}\n"
                     "  admin:\n    max_level: all\n    actions: [verify, keys.write, keys.read]\n")
    svc = make_service(sqlite_url, model_aware=True, roles_file=roles, model_aware_max_request_tokens=50)
    svc.init_keys()
    n = len(svc.ctx.tokenizers(svc.ctx.profile.tokenizer).encode_ids([HUMAN])[0])
    assert 25 < n <= 50
    r = _verify(svc, [HUMAN, HUMAN])
    assert r.status_code == 413 and "HERO_MODEL_AWARE_MAX_REQUEST_TOKENS" in r.json()["detail"]
    assert f"{2 * n} tokens long in all" in r.json()["detail"]
    assert _verify(svc, [HUMAN]).status_code == 200  # n LM tokens of the 50 a minute
    r = _verify(svc, [HUMAN])
    assert r.status_code == 429 and "50 LM tokens (model-aware scoring) per minute" in r.json()["detail"]
    assert int(r.headers["Retry-After"]) >= 1
    free = make_service(sqlite_url, roles_file=roles)  # model-free: the LM never runs, no LM tokens counted
    assert _verify(free, [HUMAN]).status_code == 200 and _verify(free, [HUMAN]).status_code == 200


@pytest.mark.slow
def test_a_decode_past_its_deadline_answers_503_and_readyz_reports_a_stuck_one(make_service, sqlite_url, lms):
    from verifier.base.cancel import Deadline, running

    lms["factory"] = lambda vocab: SlowLM(vocab, delay=0.2)
    svc = make_service(sqlite_url, model_aware=True, model_aware_deadline_seconds=0.3,
                       model_aware_batch_tokens=256)
    svc.init_keys()
    texts = make_texts(svc, 12, steps=60)
    t0 = time.perf_counter()
    r = _verify(svc, texts)
    assert r.status_code == 503, r.text
    detail = r.json()["detail"]
    assert "HERO_MODEL_AWARE_DEADLINE_SECONDS=0.3" in detail and "nothing was released" in detail
    assert time.perf_counter() - t0 < 5
    assert svc.client.get("/readyz").status_code == 200
    with running(Deadline(-30.0)):  # a decode that stopped reaching its checks
        r = svc.client.get("/readyz")
        assert r.status_code == 503 and "past their deadline" in r.json()["detail"]
    assert svc.client.get("/readyz").status_code == 200


@pytest.mark.slow
def test_a_client_disconnect_stops_the_lm(make_service, sqlite_url, lms):
    from verifier.api.verify import _cancellable
    from verifier.base.cancel import DecodeStopped
    from verifier.verify.runner import DecodeJob

    lms["factory"] = lambda vocab: SlowLM(vocab, delay=0.3)
    svc = make_service(sqlite_url, model_aware=True, model_aware_batch_tokens=256)
    svc.init_keys()
    texts = make_texts(svc, 24, steps=60)  # several forward passes of 0.3 s each
    ctx = svc.ctx
    principal = type("P", (), {"actor": None})()

    async def leaves():
        await asyncio.sleep(0.2)
        return {"type": "http.disconnect"}

    job = DecodeJob(ctx.profile, tuple(texts), 2, ctx.settings.alpha)
    t0 = time.perf_counter()
    with pytest.raises(DecodeStopped, match="cancelled"):
        asyncio.run(_cancellable(ctx, principal, job, leaves))
    assert time.perf_counter() - t0 < 2.0
    assert lms["smollm2"].calls < 6  # stopped after the pass in flight, not after all of them


SERVER = textwrap.dedent("""
    import sys, time, types
    import uvicorn
    from tests.verify.test_model_aware_bounds import SlowLM
    from verifier import lm

    def load_model(name="smollm2", device="cpu"):
        m = getattr(lm, "_slow", None) or SlowLM(lm.VOCAB_SIZES[name], delay=4.0)
        lm._slow = m
        return m, None

    lm.load_model = load_model
    from tests.helpers.service import make_settings
    from verifier.api.app import create_app
    settings = make_settings(__import__("pathlib").Path(sys.argv[1]), sys.argv[2], model_aware=True,
                             model_aware_batch_tokens=256, model_aware_deadline_seconds=600)
    uvicorn.run(create_app(settings), host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
""")


@pytest.mark.slow
def test_sigterm_ends_the_server_within_seconds_during_a_model_aware_decode(tmp_path, sqlite_url, make_service):
    import socket

    import httpx

    from tests.helpers.service import make_settings
    from verifier.auth.devkeys import mint_token

    setup = make_service(sqlite_url)  # keys made once, in this process; the server shares the database
    setup.init_keys()
    texts = make_texts(setup, 24, steps=60)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = setup.settings.home
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(home), sqlite_url, str(port)], env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = mint_token(make_settings(home, sqlite_url), "auditor", "alice", 3600)
        import threading

        answers = []

        def ask():
            try:
                answers.append(httpx.post(base + "/v1/verify", json={"texts": texts}, timeout=60,
                                          headers={"Authorization": f"Bearer {token}"}).status_code)
            except httpx.HTTPError as exc:
                answers.append(type(exc).__name__)

        t = threading.Thread(target=ask)
        t.start()
        time.sleep(5.0)  # the LM is in its passes (4 s each, 24 s of them in all)
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.time() - t0 < 12, time.time() - t0  # without the stop: the 19 s of passes left, then exit
        t.join(timeout=10)
        assert answers and answers[0] != 200, answers
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
