"""Profiles are validated data; payload fields map to segment values and back."""

from __future__ import annotations

import pytest

from verifier.engine.payload import PayloadError, decode_fields, encode_payload, parse_field_args
from verifier.engine.profile import SPEC_VERSIONS, ProfileError, default_profile, make_profile, profile_from_dict


def test_default_profile_is_paper_hero2_2_2_24_bits():
    p = default_profile()
    assert p.label() == "HeRo2(2,2)" and p.total_bits == 24 and p.segments == 6
    assert p.schedule == (80,) and p.vocab_size == 49152 and p.context_width == 3  # v2: h = 3 (spec section 14)
    assert p.routing == "contiguous" and p.routing_stride == 0
    assert p.field_names() == ["model", "user"] and p.field_level("user") == 2
    # spec v2: level 1 keeps 2-bit segments (4 keys), level 2 one key per whole 12-bit user
    assert p.spec_version == 2 and p.windows == 8
    assert [(lv.encoding, lv.key_bits) for lv in p.levels] == [("segments", 2), ("value", 12)]


def test_v1_profile_is_the_previous_default():
    from verifier.engine.profile import v1_profile

    p = v1_profile()
    assert p.spec_version == 1 and p.windows == 1 and p.schedule == (80,) and p.context_width == 4
    assert [(lv.encoding, lv.key_bits) for lv in p.levels] == [("segments", 2), ("segments", 2)]


@pytest.mark.parametrize(
    "bits,total",
    [((3,), 24), ((2, 1), 24), ((2, 2, 2, 2), 24), ((1,) * 8, 24), ((2,), 12), ((2, 2), 48), ((1, 1), 24)],
)
def test_any_depth_builds_and_round_trips(bits, total):
    sched = (20,) + (2,) * (len(bits) - 2) if len(bits) > 1 else None
    p = make_profile(bits, total, vocab_size=49152, schedule=sched)
    assert p.depth == len(bits) and p.total_bits == total
    values = {f.name: (0x5A5A5A5A5A5A >> 3) % (1 << f.bits) for lv in p.levels for f in lv.fields}
    segs = encode_payload(p, values)
    for lv in range(1, p.depth + 1):
        assert decode_fields(p, lv, [s[lv - 1] for s in segs]) == {
            f.name: values[f.name] for f in p.levels[lv - 1].fields
        }


def test_segment_bit_layout_msb_first():
    p = default_profile()
    segs = encode_payload(p, {"model": 0b10_01_00_11_11_01, "user": 0})
    assert [s[0] for s in segs] == [2, 1, 0, 3, 3, 1]


def test_per_value_level_carries_the_whole_value_in_every_segment():
    from verifier.engine.payload import segments_value, value_fields

    p = default_profile()
    segs = encode_payload(p, {"model": 0b10_01_00_11_11_01, "user": 3001})
    assert [s[1] for s in segs] == [3001] * p.segments
    assert value_fields(p, 2, 3001) == {"user": 3001} and value_fields(p, 2, None) == {"user": None}
    assert value_fields(p, 1, segments_value(p, 1, [s[0] for s in segs])) == {"model": 0b10_01_00_11_11_01}


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.pop("vocab_size"), "missing 'vocab_size'"),
        (lambda d: d.update(segments=0), "segments must be"),
        (lambda d: d["levels"][0].update(bits=9), "bits must be in 1..8"),
        (lambda d: d["levels"][0].update(chunks=1), "chunks must be >= 2"),
        (lambda d: d["levels"][1].update(chunks=4), "takes no 'chunks'"),
        (lambda d: d["levels"][0]["fields"][0].update(bits=11), "fields hold 11 bits"),
        (lambda d: d["levels"][1]["fields"][0].update(name="model"), "defined twice"),
        (lambda d: d["levels"][0]["fields"][0].update(name="Bad Name"), "must match"),
        (lambda d: d.update(vocab_size=10), "exceeds vocab_size"),
        (lambda d: d.update(spec_version=max(SPEC_VERSIONS) + 1), "not supported"),
        (lambda d: d["levels"][0].update(encoding="value"), "needs spec_version 3"),
        (lambda d: d["levels"][1].update(encoding="rows"), "encoding must be one of"),
        (lambda d: d.update(spec_version=1), "needs spec_version 2"),
        (lambda d: (d.update(segments=9), d["levels"][1]["fields"][0].update(bits=18),
                    d["levels"][0]["fields"][0].update(bits=18)), "exceeds 16"),
        (lambda d: d.update(levels=[]), "non-empty list"),
        (lambda d: d.update(context_width="4"), "must be an integer"),
        (lambda d: d.update(routing="random"), "routing must be"),
    ],
)
def test_invalid_profiles_have_clear_errors(mutate, message):
    d = default_profile().to_dict()
    mutate(d)
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(d)


def test_payload_errors():
    p = default_profile()
    with pytest.raises(PayloadError, match="unknown field 'nope'"):
        encode_payload(p, {"model": 1, "user": 2, "nope": 3})
    with pytest.raises(PayloadError, match="does not fit in 12 bits"):
        encode_payload(p, {"model": 4096, "user": 0})
    with pytest.raises(PayloadError, match="missing field 'user'"):
        encode_payload(p, {"model": 1})
    with pytest.raises(PayloadError, match="name=value"):
        parse_field_args(p, ["model"])
    with pytest.raises(PayloadError, match="not an integer"):
        parse_field_args(p, ["model=abc"])
    assert parse_field_args(p, ["model=37", "user=0x10"]) == {"model": 37, "user": 16}


def test_undecoded_segment_gives_null_field_only_where_touched():
    p = make_profile((2, 2), 24, vocab_size=1000)
    # 'level1' spans all segments; with one undecoded segment the whole field is unknown.
    assert decode_fields(p, 1, [1, 2, None, 3, 0, 1]) == {"level1": None}
    two = profile_from_dict(
        {
            **p.to_dict(),
            "levels": [
                {"bits": 2, "chunks": 20, "fields": [{"name": "a", "bits": 6}, {"name": "b", "bits": 6}]},
                {"bits": 2, "fields": [{"name": "c", "bits": 12}]},
            ],
        }
    )
    assert decode_fields(two, 1, [1, 2, 3, None, 0, 1]) == {"a": 0b011011, "b": None}


def test_paper_k20_profile_differs_from_v1_default_only_in_k1():
    from verifier.engine.profile import PROFILES_DIR, load_profile, v1_profile

    paper, default = load_profile(PROFILES_DIR / "paper-k20.yaml"), v1_profile()
    assert paper.name == "paper-k20" and paper.schedule == (20,) and default.schedule == (80,)
    d, q = default.to_dict(), paper.to_dict()
    d.pop("name"), q.pop("name")
    d["levels"][0].pop("chunks"), q["levels"][0].pop("chunks")
    assert d == q
