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


def _slots(n: int = 4):
    profile = v1_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    return profile, RequestSlots(n, "cpu", lambda: bundle)


def _draw(slots: RequestSlots, profile, host_slots: list[int], seed: int = 0):
    b, h = len(host_slots), profile.context_width
    logits = torch.randn(b, profile.vocab_size, generator=torch.Generator().manual_seed(seed))
    ctx = torch.randint(0, profile.vocab_size, (b, h), generator=torch.Generator().manual_seed(seed))
    rows = torch.arange(b)
    slots.generated[torch.tensor(host_slots)] = 10
    slots.log.ensure(11)
    return slots.draw(logits, rows, torch.tensor(host_slots), host_slots, ctx, torch.Generator().manual_seed(1),
                      every_row=True)


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
