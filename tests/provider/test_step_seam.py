"""The serving-engine seam (verifier/provider/step.py): the one payload parser, per-request slots, replay after
preemption, and failures confined to their own request."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.vectors.make_generation_vector import fixed_keyset, opened_bundle
from verifier.engine.profile import v1_profile
from verifier.provider.step import RequestSlots, one_hot_rows, parse_payload, validate_payload


def test_parse_payload_is_the_one_reader_of_a_requests_fields():
    assert parse_payload(None) is None and parse_payload({}) is None and parse_payload({"other": 1}) is None
    assert parse_payload({"hero": {"model": 1, "user": 2}}) == {"model": 1, "user": 2}
    for bad in ({"hero": [1, 2]}, {"hero": {"user": "2"}}, {"hero": {"user": True}}, {"hero": {3: 4}}):
        with pytest.raises(ValueError, match="field names to integers"):
            parse_payload(bad)



def test_parse_payload_reads_flat_vllm_xargs_keys():
    """vLLM's OpenAI server passes `vllm_xargs` (flat values only) as the extra arguments."""
    assert parse_payload({"hero_model": 37, "hero_user": 1234, "kv_transfer_params": {}}) == {"model": 37,
                                                                                              "user": 1234}
    assert parse_payload({"hero_user": "1234"}) == {"user": 1234}  # a quoted number from an HTTP client
    for bad, why in (({"hero_user": True}, "must be an integer"), ({"hero_user": 1.5}, "must be an integer"),
                     ({"hero_user": [1]}, "must be an integer"), ({"hero_user": "12a"}, "must be an integer"),
                     ({"hero_": 1}, "hero_<field>"), ({"hero": {"user": 1}, "hero_model": 2}, "not both")):
        with pytest.raises(ValueError, match=why):
            parse_payload(bad)

def test_admission_refuses_greedy_requests_missing_bundles_and_bad_fields():
    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    validate_payload({"model": 1, "user": 2}, 0.7, lambda: bundle)
    with pytest.raises(ValueError, match="temperature"):
        validate_payload({"model": 1, "user": 2}, 0.0, lambda: bundle)
    with pytest.raises(ValueError, match=r"no HeRo bundle configured \(HERO_X\)"):
        validate_payload({"model": 1, "user": 2}, 1.0, lambda: None, "HERO_X")
    with pytest.raises(ValueError, match="user"):
        validate_payload({"model": 1, "user": 1 << 20}, 1.0, lambda: bundle)


STOP = 2  # the model's end-of-sequence id in these tests


def _slots(n: int = 4):
    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    return profile, RequestSlots(n, "cpu", lambda: bundle, stop_token=STOP)


def _draw(slots: RequestSlots, profile, host_slots: list[int], seed: int = 0):
    b, h = len(host_slots), profile.context_width
    logits = torch.randn(b, profile.vocab_size, generator=torch.Generator().manual_seed(seed))
    ctx = torch.randint(0, profile.vocab_size, (b, h), generator=torch.Generator().manual_seed(seed))
    return slots.draw(logits, host_slots, ctx, [10] * b, torch.Generator().manual_seed(1))


def test_a_request_that_cannot_be_set_up_is_left_alone_and_the_others_are_drawn(caplog):
    profile, slots = _slots()
    caplog.set_level(logging.DEBUG)
    assert slots.add(0, {"model": 5, "user": 6})
    assert not slots.add(1, {"model": 5, "user": 987654321})  # does not fit: only this request fails
    assert slots.errors == {1: "PayloadError"}
    assert "987654321" not in caplog.text  # only the exception's type is logged
    assert not slots.add(2, None) and 2 not in slots.errors  # a plain request is no failure
    tokens, drawn = _draw(slots, profile, [0, 1, 2])
    assert drawn.tolist() == [True, False, False]
    logits = torch.zeros(3, profile.vocab_size)
    one_hot_rows(logits, torch.arange(3)[drawn], tokens[drawn])
    assert torch.isfinite(logits[0]).sum() == 1 and torch.isfinite(logits[1:]).all()
    assert slots.add(1, {"model": 5, "user": 7}) and 1 not in slots.errors  # the slot's next request is fine


def test_a_draw_that_raises_fails_only_its_own_group():
    profile, slots = _slots()
    assert slots.add(0, {"model": 5, "user": 6})
    old = slots.samplers[0]
    slots.sampler = None  # as after a rotation: the next request starts with new tables (a second group)
    assert slots.add(1, {"model": 5, "user": 7})
    assert slots.samplers[1] is not old

    def broken(*args, **kwargs):
        raise RuntimeError("device lost")

    old.step = broken
    _, drawn = _draw(slots, profile, [0, 1])
    assert drawn.tolist() == [False, True]
    assert slots.errors == {0: "RuntimeError"} and slots.samplers[0] is None
    _, drawn = _draw(slots, profile, [0, 1], seed=1)  # the failed request stays unwatermarked
    assert drawn.tolist() == [False, True]


def test_replay_logs_a_resumed_requests_contexts_and_moves_with_it():
    profile, slots = _slots()
    h = profile.context_width
    ids = [1, 2, 3, 4, 5, 1, 2, 3, 4, 9]  # one context (1, 2, 3, 4) twice
    assert slots.add(2, {"model": 5, "user": 6}, tokens=ids)
    assert int(slots.log.counts[2]) == len({tuple(ids[g - h: g]) for g in range(h, len(ids))})
    assert slots.add(3, {"model": 5, "user": 6})
    assert int(slots.log.counts[3]) == 0
    slots.move(2, 3, swap=True)
    assert int(slots.log.counts[3]) == 5 and int(slots.log.counts[2]) == 0


def test_the_seam_refuses_speculative_decoding_and_needs_a_stop_token():
    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    with pytest.raises(ValueError, match="speculative decoding"):
        RequestSlots(2, "cpu", lambda: bundle, stop_token=STOP, speculative=True)
    with pytest.raises(TypeError):
        RequestSlots(2, "cpu", lambda: bundle)  # no default end-of-sequence id: the engine names its own
    with pytest.raises(ValueError, match="stop_token"):
        RequestSlots(2, "cpu", lambda: bundle, stop_token=None)


def test_step_ends_a_request_whose_draw_failed_and_draws_the_others():
    profile, slots = _slots()
    assert slots.add(0, {"model": 5, "user": 6}, prompt=[1, 2, 3])
    slots.sampler = None  # a rotation: request 1 gets tables of its own (a second group)
    assert slots.add(1, {"model": 5, "user": 7}, prompt=[1, 2, 3])
    assert not slots.add(2, None)

    def broken(*args, **kwargs):
        raise RuntimeError("device lost")

    slots.samplers[0].step = broken
    for seed in range(2):  # the failing step and the next: slot 0 stays ended
        logits = torch.randn(3, profile.vocab_size, generator=torch.Generator().manual_seed(seed))
        plain = logits[2].clone()
        out = slots.step(logits, [0, 1, 2])
        assert out is logits and int(out[0].argmax()) == STOP and torch.isfinite(out[0]).sum() == 1
        assert torch.isfinite(out[1]).sum() == 1  # drawn
        assert torch.equal(out[2], plain)
    assert slots.errors == {0: "RuntimeError"} and slots.refused[0] and not slots.watermarked(0)
    slots.remove(0)
    assert 0 not in slots.errors and not slots.refused[0]


def test_enforce_mode_ends_requests_without_a_payload_and_unused_slots():
    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    slots = RequestSlots(4, "cpu", lambda: bundle, stop_token=STOP, enforce=True)
    assert not slots.add(0, None)
    assert not slots.admit(1, {"hero": {"user": "x"}}) and slots.errors == {1: "ValueError"}
    assert slots.admit(2, {"hero_model": 1, "hero_user": 2}, prompt=[4, 5])
    out = slots.step(torch.zeros(4, profile.vocab_size), [0, 1, 2, 3])  # slot 3: no request was ever added
    assert out.argmax(dim=1).tolist()[:2] == [STOP, STOP] and int(out[3].argmax()) == STOP
    assert (torch.isfinite(out).sum(dim=1) == 1).all()
    slots.move(0, 2, swap=True)  # the refusal moves with its request
    assert slots.refused[2] and not slots.refused[0] and slots.watermarked(0)


def test_step_with_engine_contexts_draws_what_draw_draws():
    """An engine with its own token history gives contexts and counts: the same tokens as the bare draw."""
    profile, a = _slots()
    _, b = _slots()
    for s in (a, b):
        for slot in range(3):
            assert s.add(slot, {"model": 5, "user": slot})
    logits = torch.randn(3, profile.vocab_size, generator=torch.Generator().manual_seed(3))
    ctx = torch.randint(0, profile.vocab_size, (3, profile.context_width), generator=torch.Generator().manual_seed(4))
    tokens, drawn = a.draw(logits.clone(), [2, 0, 1], ctx, [10, 10, 10], torch.Generator().manual_seed(1))
    out = b.step(logits.clone(), [2, 0, 1], contexts=ctx, generated=torch.tensor([10, 10, 10]), capacity=11,
                 generator=torch.Generator().manual_seed(1))
    assert drawn.all() and out.argmax(dim=1).tolist() == tokens.tolist()


def test_the_vllm_plugin_is_a_translation_onto_the_seams_policy(tmp_path, monkeypatch):
    """vLLM's legacy runner processor (vLLM stood in for: its three imported names) over a batch of a good, a
    malformed, a prompt-embeds, a flat-keys and a plain request: the seam's policy ends the bad ones with EOS."""
    import sys

    from tests.vectors import make_generation_vector as G
    from verifier.engine.profile import default_profile

    if "vllm" not in sys.modules:
        for name, mod in G.fake_vllm().items():
            monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "verifier.provider.vllm", raising=False)
    from types import SimpleNamespace

    from verifier.provider import vllm as plugin

    profile = default_profile()
    for enforce in (False, True):
        monkeypatch.setenv(plugin.ENV_ENFORCE, "1" if enforce else "0")
        monkeypatch.setattr(plugin, "_KEYS", G._Keys(opened_bundle(profile, fixed_keyset(profile))))
        config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=8), speculative_config=None,
                                 model_config=SimpleNamespace(hf_text_config=SimpleNamespace(eos_token_id=[STOP]),
                                                              hf_config=None))
        proc = plugin.HeroLogitsProcessor(config, "cpu", False)
        assert proc.slots.stop_token == STOP and proc.slots.enforce is enforce
        good = {"hero": {"model": 37, "user": 1234}}
        params = [G._params(good["hero"]), SimpleNamespace(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                           extra_args={"hero": {"user": "x"}}),
                  G._params(good["hero"]), SimpleNamespace(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                           extra_args={"hero_model": 1, "hero_user": 7}),
                  G._params(None)]
        prompts = [[5, 6, 7, 8], [5, 6, 7], None, [9, 10, 11, 12, 13], [5, 6]]  # row 2: prompt embeddings
        outputs: list[list[int]] = [[] for _ in params]
        proc.update_state(SimpleNamespace(removed=[], moved=[], added=[
            (i, sp, p, o) for i, (sp, p, o) in enumerate(zip(params, prompts, outputs, strict=True))]))
        gen = torch.Generator().manual_seed(0)
        for _ in range(3):
            logits = torch.randn(5, profile.vocab_size, generator=gen)
            plain = logits[4].clone()
            out = proc.apply(logits)
            picked = out.argmax(dim=1).tolist()
            assert torch.isfinite(out).sum(dim=1).tolist()[:4] == [1, 1, 1, 1]
            assert picked[1] == STOP and picked[2] == STOP  # malformed payload, prompt embeds: ended
            if enforce:
                assert picked[4] == STOP
            else:
                assert torch.equal(out[4], plain)
            for i, t in enumerate(picked):
                outputs[i].append(t)
        assert set(proc.slots.errors) == {1, 2} and proc.slots.watermarked(0) and proc.slots.watermarked(3)
        proc.update_state(SimpleNamespace(removed=[1], moved=[(2, 1, G._Move.UNIDIRECTIONAL)], added=[]))
        assert set(proc.slots.errors) == {1} and proc.slots.refused[1] and proc.slots.refused[2] is enforce
    speculative = SimpleNamespace(**{**vars(config), "speculative_config": object()})
    with pytest.raises(ValueError, match="speculative"):
        plugin.HeroLogitsProcessor(speculative, "cpu", False)
    monkeypatch.delitem(sys.modules, "verifier.provider.vllm", raising=False)
