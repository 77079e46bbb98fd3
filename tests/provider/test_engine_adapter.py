"""A second engine on the seam (no vLLM): docs/providers.md's "Other serving engines" example, run as written in
a minimal engine loop. The seam owns the serving policy, so a copy of the example is safe: a request whose draw
fails ends with the end-of-sequence id and no unwatermarked token leaves for it, while the other requests of the
batch go on watermarked (they decode to their users); in enforce mode a request without a payload gets no text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.decoder import Decoder
from verifier.engine.profile import default_profile
from verifier.provider.bundle import generate_keypair

ROOT = Path(__file__).resolve().parents[2]
EOS = 2


def example() -> str:
    text = (ROOT / "docs" / "providers.md").read_text()
    section = text[text.index("## Other serving engines (`verifier.provider.step`)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@dataclass
class Request:
    prompt_ids: list[int]
    extra: dict | None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    output_ids: list[int] = field(default_factory=list)
    done: bool = False


def load_example(tmp_path, *, enforce: bool = False, max_requests: int = 8):
    """The docs' code block as written, its three paths pointed at a signed bundle in `tmp_path` and its device
    at the CPU (and, for enforce mode, its one `enforce=` switched on)."""
    profile = default_profile()
    keyset = make_keyset(profile)
    sk, pk = generate_keypair()
    (tmp_path / "bundle").write_bytes(bundles.signed(bundles.header(profile, keyset, bundle_id="adapter"), keyset, pk))
    (tmp_path / "key").write_bytes(sk)
    (tmp_path / "service.vkey").write_text(bundles.SERVICE_VKEY + "\n")
    code = example()
    for old, new in (("/run/hero/x25519.key", tmp_path / "key"), ("/run/hero/bundle", tmp_path / "bundle"),
                     ("/etc/hero/service.vkey", tmp_path / "service.vkey"), ('"cuda"', '"cpu"'),
                     ('"fleet-1"', repr(bundles.PROVIDER))):
        assert old in code, old
        code = code.replace(old, str(new))
    if enforce:
        assert "enforce=False" in code
        code = code.replace("enforce=False", "enforce=True")
    ns = {"max_requests": max_requests, "tokenizer": SimpleNamespace(eos_token_id=EOS)}
    exec(compile(code, "docs/providers.md", "exec"), ns)  # the documented example, as written
    return ns, profile, keyset


def run_engine(ns, requests: list[Request], steps: int, vocab: int, seed: int = 0, on_step=None):
    """A minimal continuous-batching engine: request i in slot i; each step the live requests' logits (EOS made
    unlikely, so only a forced EOS ends a request early) go through `before_sampling`, then the engine's own
    sampler (softmax + multinomial) picks each row's token. Returns every step's (slots, logits in, logits out)."""
    gen = torch.Generator().manual_seed(seed)
    for i, r in enumerate(requests):
        ns["on_new_request"](i, r)
    trace = []
    for t in range(steps):
        if on_step is not None:
            on_step(t)
        live = [i for i, r in enumerate(requests) if not r.done]
        if not live:
            break
        logits = torch.randn(len(live), vocab, generator=gen) * 3
        logits[:, EOS] -= 30
        before = logits.clone()
        out = ns["before_sampling"](logits, SimpleNamespace(slots=live))
        tokens = torch.multinomial(torch.softmax(out, dim=-1), 1, generator=gen).squeeze(1).tolist()
        trace.append((live, before, out.clone()))
        for i, tok in zip(live, tokens, strict=True):
            r = requests[i]
            r.output_ids.append(tok)
            if tok == EOS:
                r.done = True
                ns["on_finished"](i)
    return trace


def test_the_example_is_whole():
    code = example()
    for needed in ("BundleKeys(", "RequestSlots(", "stop_token=", "slots.admit(", "slots.step(", "slots.remove("):
        assert needed in code, needed
    for internal in ("slots.generated", "slots.log", "one_hot_rows"):  # an engine never writes the seam's state
        assert internal not in code, internal


def test_a_failed_draw_ends_its_request_with_eos_and_the_others_continue_watermarked(tmp_path):
    ns, profile, keyset = load_example(tmp_path)
    slots = ns["slots"]
    users = [{"model": 37, "user": 1234}, {"model": 200, "user": 7}, None, {"model": 1, "user": 4095}]
    requests = [Request([5, 6, 7, 8], {"hero": u} if u else None) for u in users]
    # Request 0 keeps the tables it started with; the others start after a rotation (same keys, a new bundle id),
    # so request 0's draw is a group of its own, which a device error below breaks.
    ns["on_new_request"](0, requests[0])
    second = replace(slots._bundles(), bundle_id="rotated")
    slots._bundles = lambda: second
    fail_at = 20

    def on_step(t):
        if t == fail_at:
            def broken(*args, **kwargs):
                raise RuntimeError("device lost")
            slots.samplers[0].step = broken

    for i, r in enumerate(requests[1:], start=1):
        ns["on_new_request"](i, r)
    assert slots.samplers[0] is not slots.samplers[1] is slots.samplers[3]
    ns_on_new = ns["on_new_request"]
    ns["on_new_request"] = lambda slot, req: None  # all four are in their slots already
    try:
        trace = run_engine(ns, requests, 160, profile.vocab_size, on_step=on_step)
    finally:
        ns["on_new_request"] = ns_on_new
    r0 = requests[0]
    assert r0.done and len(r0.output_ids) == fail_at + 1 and r0.output_ids[-1] == EOS
    assert slots.errors == {} and not slots.refused[0]  # ended, then removed: the slot is free again
    for live, before, out in trace:
        for row, slot in enumerate(live):
            if users[slot] is None:
                assert torch.equal(out[row], before[row])  # a plain request's row is untouched
            else:  # every row of a watermarked request is forced: a watermarked draw, or EOS once it failed
                assert torch.isfinite(out[row]).sum() == 1
    for live, _, out in trace[fail_at:fail_at + 1]:
        assert int(out[live.index(0)].argmax()) == EOS
    assert all(not requests[i].done and len(requests[i].output_ids) == 160 for i in (1, 2, 3))
    dec = Decoder(profile, {1: [keyset.tables[0]], 2: [keyset.tables[1]]})
    results = dec.decode_ids([requests[i].output_ids for i in (1, 2, 3)])
    for r, u in zip((results[0], results[2]), (users[1], users[3]), strict=True):
        assert r.watermarked and r.p_value < 1e-6, r
        assert r.levels[1].fields["user"] == u["user"], (r, u)
    assert not results[1].watermarked  # the plain request


def test_enforce_mode_gives_a_request_without_payload_no_text(tmp_path):
    ns, profile, _ = load_example(tmp_path, enforce=True)
    requests = [Request([5, 6, 7], None), Request([5, 6, 7], {"hero": {"user": "x"}}),  # malformed past admission
                Request([5, 6, 7], {"hero": {"model": 37, "user": 1234}})]
    run_engine(ns, requests, 6, profile.vocab_size)
    assert requests[0].output_ids == [EOS] and requests[1].output_ids == [EOS]
    assert len(requests[2].output_ids) == 6 and EOS not in requests[2].output_ids


def test_without_enforce_a_plain_request_passes_and_a_malformed_one_ends(tmp_path):
    ns, profile, _ = load_example(tmp_path)
    requests = [Request([5, 6, 7], None), Request([5, 6, 7], {"hero_user": "12a"})]
    run_engine(ns, requests, 4, profile.vocab_size)
    assert len(requests[0].output_ids) == 4 and requests[1].output_ids == [EOS]


@pytest.mark.parametrize("resumed", [0, 7])
def test_the_seam_builds_contexts_from_the_ids_it_is_given(tmp_path, resumed):
    """The example gives prompt and output ids only: the seam's contexts are `context_tail` of them, and the tokens
    it forces are appended, so step g's context holds the tokens drawn before it (as an engine-built one would)."""
    from verifier.engine.fused import context_tail

    ns, profile, _ = load_example(tmp_path)
    slots = ns["slots"]
    drawn = list(range(100, 100 + resumed))
    req = Request([5, 6, 7, 8, 9, 10], {"hero": {"model": 1, "user": 2}}, output_ids=list(drawn))
    run_engine(ns, [req], 5, profile.vocab_size)
    h = profile.context_width
    assert slots.contexts([0]).tolist() == [context_tail(req.prompt_ids, req.output_ids, h)]
    assert int(slots.generated[0]) == len(req.output_ids) == resumed + 5
