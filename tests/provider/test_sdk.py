"""The provider SDK: importable without the service stack; its sampler step is the engine's, exactly."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.payload import PayloadError
from verifier.engine.profile import default_profile, v1_profile
from verifier.provider import BundleSampler, RequestState, generate_keypair, logits_processor
from verifier.provider.generation import HeroLogitsProcessor

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('fastapi', 'sqlalchemy', 'pydantic_settings', 'starlette', 'alembic'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_sdk_imports_without_fastapi_sqlalchemy_or_settings():
    code = BLOCKER + (
        "import json, pathlib\n"
        "from verifier.provider import open_bundle, BundleSampler, generate, logits_processor, BundleSource\n"
        "from verifier.client import HeroClient, VerifyResult\n"
        "v = json.loads(pathlib.Path('tests/vectors/bundle_v1.json').read_text())\n"
        "b = open_bundle(v['expected']['bundle_b64'], bytes.fromhex(v['inputs']['recipient_private']),\n"
        "                service_key=None, provider_id='vector-provider', allow_unsigned=True)\n"
        "s = BundleSampler(b)\n"
        "bad = {'fastapi', 'sqlalchemy', 'pydantic_settings', 'starlette'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not bad, bad\n"
        "print('ok', s.key_versions)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ok {1: 'l1-v1', 2: 'l2-v3'}" in res.stdout
    # the blocker does block: importing the service fails under it
    res = subprocess.run([sys.executable, "-c", BLOCKER + "import verifier.registry.service"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and "blocked" in res.stderr


def _bundle(profile, keyset=None):
    keyset = keyset or make_keyset(profile, seed=2)
    sk, pk = generate_keypair()
    now = datetime.now(UTC).replace(microsecond=0)
    header = {"bundle_id": "x" * 32, "provider_id": "acme", "profile": profile.to_dict(),
              "key_versions": {str(t.level): t.version for t in keyset.tables}, "issued_at": now.isoformat(),
              "expires_at": (now + timedelta(hours=1)).isoformat(), "etag": "t"}
    return keyset, bundles.open_signed(bundles.signed(header, keyset, pk), sk)


@pytest.mark.parametrize("make_profile", [default_profile, v1_profile])
def test_sampler_step_equals_the_engine_processor(make_profile):
    """Same keys, logits, contexts and generator: `BundleSampler.step` draws exactly the tokens
    `HeroLogitsProcessor` (what `hero generate` runs) draws, step after step, marks included."""
    profile = make_profile()
    keyset, bundle = _bundle(profile)
    h = profile.context_width
    payloads = [{"model": 37, "user": 1234}, {"model": 4000, "user": 7}, {"model": 1, "user": 4095}]
    rows, steps = len(payloads), h + 12
    torch.manual_seed(0)
    logits = torch.randn(steps, rows, profile.vocab_size) * 3
    prompt = torch.randint(0, profile.vocab_size, (rows, 5))

    proc = HeroLogitsProcessor(profile, keyset, payloads, generator=torch.Generator().manual_seed(9))
    seq = prompt.clone()
    want = []
    for t in range(steps):
        out = proc(seq, logits[t].clone())
        tok = out.argmax(dim=1)
        if t == h + 4:
            tok = seq[:, -1].clone()  # force a repeat so the seen-context path matters
        want.append(tok)
        seq = torch.cat([seq, tok[:, None]], dim=1)

    sampler = BundleSampler(bundle)
    pay = torch.stack([sampler.payload(p) for p in payloads])
    states = [RequestState() for _ in payloads]
    gen = torch.Generator().manual_seed(9)
    seq = prompt.clone()
    for t in range(steps):
        tok = sampler.step(logits[t], seq[:, -h:], pay, states, gen)
        if t == h + 4:
            tok = seq[:, -1].clone()
        assert torch.equal(tok, want[t]), t
        seq = torch.cat([seq, tok[:, None]], dim=1)
    assert [st.generated for st in states] == [steps] * rows
    assert [st.contexts for st in states] == proc.log.counts.tolist()
    # spec v2: the first h contexts touch the prompt and are never recorded; v1 marks them, also unrecorded
    assert all(0 < st.contexts <= steps - h for st in states)


def test_first_h_tokens_use_fresh_randomness_under_v2():
    """With the profile's h: the same key/payload/context gives the same token once generated >= h, but the
    first h tokens depend on the generator (spec v2 never marks contexts that touch the prompt)."""
    profile = default_profile()
    h = profile.context_width
    _, bundle = _bundle(profile)
    sampler = BundleSampler(bundle)
    logits = torch.zeros(64, profile.vocab_size)
    ctx = torch.tensor([[11, 12, 13][:h] + [14] * max(0, h - 3)] * 64)
    pay = sampler.payload({"model": 5, "user": 6})[None].expand(64, -1, -1)
    for generated, distinct in ((h - 1, True), (h, False)):
        states = [RequestState(generated=generated) for _ in range(64)]
        tok = sampler.step(logits, ctx, pay, states, torch.Generator().manual_seed(1))
        assert (tok.unique().numel() > 1) == distinct, generated


def test_a_new_request_stays_fresh_until_its_opening_is_improbable_enough():
    """The gated opening through the SDK: 3 equal live tokens (ln 3 = 1.1 nats each) and an 8-nat gate keep
    a new request fresh for 8 tokens (past h = 4), then the same context and payload give one token."""
    profile = default_profile()
    _, bundle = _bundle(profile)
    sampler = BundleSampler(bundle)  # the default gate
    logits = torch.full((64, profile.vocab_size), float("-inf"))
    logits[:, [7, 700, 7000]] = 0.0
    ctx = torch.tensor([[11, 12, 13, 14][: profile.context_width]] * 64)
    pay = sampler.payload({"model": 5, "user": 6})[None].expand(64, -1, -1)
    states = [RequestState() for _ in range(64)]
    g = torch.Generator().manual_seed(1)
    distinct = [sampler.step(logits, ctx, pay, states, g).unique().numel() for _ in range(9)]
    assert all(d > 1 for d in distinct[:8]) and distinct[8] == 1  # (a 10th step repeats the context: fresh)
    assert states[0].generated == 9 and states[0].opening_need < 0
    off = BundleSampler(bundle, opening_nats=0)
    late = [RequestState(generated=profile.context_width) for _ in range(64)]
    assert off.step(logits, ctx, pay, late, g).unique().numel() == 1


def test_payloads_and_shapes_are_validated():
    profile = default_profile()
    _, bundle = _bundle(profile)
    sampler = BundleSampler(bundle)
    with pytest.raises(PayloadError):
        sampler.payload({"model": 5})  # missing user
    with pytest.raises(PayloadError):
        sampler.payload({"model": 5, "user": 1 << 20})
    with pytest.raises(ValueError, match="vocab_size"):
        sampler.step(torch.zeros(1, 10), torch.zeros(1, profile.context_width), sampler.payload(
            {"model": 1, "user": 1})[None], [RequestState()])
    with pytest.raises(ValueError, match="B rows"):
        sampler.step(torch.zeros(1, profile.vocab_size), torch.zeros(1, profile.context_width + 1),
                     sampler.payload({"model": 1, "user": 1})[None], [RequestState()])
    proc = logits_processor(bundle, [{"model": 1, "user": 2}], temperature=0.7, top_k=5)
    assert isinstance(proc, HeroLogitsProcessor) and len(proc.warpers) == 2
