"""What a caller may see: the decoder's result passes through whole, except levels above the caller's
maximum (never copied) and the per-bit / per-segment diagnostics."""

from __future__ import annotations

import pytest

from verifier.audit.service import Actor
from verifier.auth.policy import Grant, Policy, Role
from verifier.base.errors import Forbidden, InvalidInput, TooLarge
from verifier.engine.profile import resolve_profile
from verifier.verify.admission import check_texts
from verifier.verify.disclosure import DIAGNOSTICS, audit_events, outcome, released_digest, shape


def _level(n: int, **extra) -> dict:
    return {"level": n, "key_version": f"l{n}-v1", "fields": {f"f{n}": 7}, "confidence": 0.9, "p_value": 1e-9,
            "status": "decoded", "reason": None, "bit_confidence": [0.9] * 4, "segment_tokens": [10, 12],
            "undecoded_segments": [], **extra}


def _result(*levels: dict, **extra) -> dict:
    return {"watermarked": True, "p_value": 1e-12, "key_version": "l1-v1", "tokens_scored": 22,
            "levels": list(levels), **extra}


def test_shape_copies_what_the_decoder_adds_and_drops_diagnostics():
    raw = _result(_level(1, status="mixed", candidates=[{"fields": {"f1": 7}, "p_value": 1e-6}]),
                  _level(2, status="absent", spans=[[0, 10]]), flags=["mixed-text"])
    out = shape(raw, 2)
    assert out["flags"] == ["mixed-text"]
    assert [lv["status"] for lv in out["levels"]] == ["mixed", "absent"]
    assert out["levels"][0]["candidates"] == [{"fields": {"f1": 7}, "p_value": 1e-6}]
    assert out["levels"][1]["spans"] == [[0, 10]]
    assert not any(k in lv for lv in out["levels"] for k in DIAGNOSTICS)
    out["levels"][0]["candidates"][0]["fields"]["f1"] = 0  # a copy: the decoder's result is untouched
    assert raw["levels"][0]["candidates"][0]["fields"]["f1"] == 7
    out["levels"][1]["spans"][0][0] = 99  # lists inside lists too
    assert raw["levels"][1]["spans"] == [[0, 10]]


def test_shape_never_copies_a_level_above_the_maximum():
    raw = _result(_level(1), _level(2), _level(3))
    assert [lv["level"] for lv in shape(raw, 1)["levels"]] == [1]
    assert [lv["level"] for lv in shape(raw, 2)["levels"]] == [1, 2]
    assert "f2" not in str(shape(raw, 1)) and "l2-v1" not in str(shape(raw, 1))


def test_outcome_and_audit_events_follow_the_shaped_result():
    undecodable = _result(_level(1, status="undecodable", fields={"f1": None}), watermarked=False)
    assert outcome(shape(undecodable, 1)) == "undecodable"
    assert outcome(shape(_result(_level(1)), 1)) == "watermarked"
    assert outcome(shape(_result(_level(1), watermarked=False), 1)) == "not-watermarked"
    shaped = shape(_result(_level(1), _level(2)), 2)
    (ev,) = audit_events(Actor("s", "auditor", "j"), ["ab" * 32], [shaped], ["job=x item=0"])
    assert (ev.levels, ev.key_version, ev.outcome) == ([1, 2], "l1-v1,l2-v1", "watermarked")
    assert ev.detail == f"job=x item=0 result_sha256={released_digest(shaped)}"  # binds the released result


def test_input_checks():
    policy = Policy({"moderator": Role("moderator", 1, frozenset({"verify"})),
                     "admin": Role("admin", None, frozenset())})
    profile = resolve_profile("default")
    assert policy.grant("moderator", profile) == Grant("moderator", 1) == policy.grant("moderator", profile, 1)
    with pytest.raises(Forbidden) as err:
        policy.grant("moderator", profile, 2)
    assert err.value.status == 403 and "maximum 1" in err.value.detail()
    assert policy.grant("admin", profile).level == profile.depth  # 'all': the profile's depth
    with pytest.raises(Forbidden) as err:
        policy.grant("admin", profile, profile.depth + 1)
    assert "maximum 2" in err.value.detail()
    with pytest.raises(Forbidden, match="role not allowed"):
        policy.grant("nobody", profile)
    with pytest.raises(TooLarge):
        check_texts(["a", "b"], 1, 100)
    with pytest.raises(TooLarge):
        check_texts(["abc"], 5, 2)
    with pytest.raises(InvalidInput, match="text 2 is empty"):  # texts are numbered from 1
        check_texts(["a", "  "], 5, 100)
    with pytest.raises(InvalidInput, match="text 1 is empty"):
        check_texts(["", "a"], 5, 100)
    with pytest.raises(InvalidInput, match="lone surrogate"):
        check_texts(["\ud800"], 5, 100)
