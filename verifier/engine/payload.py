"""Named payload fields <-> per-segment level values m_k^(l).

Level l carries K*b_l bits: its fields concatenated, first field most significant. Segment k holds bits
[k*b_l, (k+1)*b_l) of that string (segment 0 = most significant). A per-value level (spec v2) is keyed
by its whole value: every segment's entry is that value (the sampler then picks the same key anywhere).
"""

from __future__ import annotations

from collections.abc import Mapping

from verifier.base.errors import clip
from verifier.engine.profile import Profile, ProfileError


class PayloadError(ValueError):
    """A payload does not fit its profile."""


def encode_payload(profile: Profile, values: Mapping[str, int]) -> list[list[int]]:
    """Field values -> segments x levels matrix of level values (each < 2^b_l)."""
    known = set(profile.field_names())
    for name in values:
        if name not in known:
            raise PayloadError(f"unknown field {clip(name)}; profile {profile.name!r} has fields {sorted(known)}")
    out = [[0] * profile.depth for _ in range(profile.segments)]
    for li, level in enumerate(profile.levels):
        acc = _level_value(level, values)
        if level.issued is not None and acc not in level.issued:  # spec v4: a decoder searches only these
            names = "+".join(f.name for f in level.fields)
            raise PayloadError(f"{names}={acc} is not issued under profile {profile.name!r} (issued: "
                               f"{list(level.issued)[:16]}{' ...' if len(level.issued) > 16 else ''}): a decoder "
                               "would never search it")
        if level.per_value:
            for k in range(profile.segments):
                out[k][li] = acc
            continue
        b = level.bits
        for k in range(profile.segments):
            shift = (profile.segments - 1 - k) * b
            out[k][li] = (acc >> shift) & ((1 << b) - 1)
    return out


def _level_value(level, values: Mapping[str, int]) -> int:
    """One level's whole value: its fields concatenated, first most significant (each checked)."""
    acc = 0
    for f in level.fields:
        if f.name not in values:
            raise PayloadError(f"missing field {f.name!r} ({f.bits} bits)")
        v = values[f.name]
        if isinstance(v, bool) or not isinstance(v, int):
            raise PayloadError(f"field {f.name!r} must be an integer")
        if not 0 <= v < (1 << f.bits):
            raise PayloadError(f"field {f.name!r}={clip(v)} does not fit in {f.bits} bits (0..{(1 << f.bits) - 1})")
        acc = (acc << f.bits) | v
    return acc


def level_values(profile: Profile, values: Mapping[str, int]) -> dict[int, int]:
    """Field values -> {level: whole level value} for the levels they name; each named level needs all of its
    fields (a level's value is their concatenation). For a one-value question (`expect`)."""
    levels: set[int] = set()
    for name in values:
        try:
            levels.add(profile.field_level(name))
        except ProfileError:
            known = sorted(profile.field_names())
            raise PayloadError(f"unknown field {clip(name)}; profile {profile.name!r} has fields {known}") from None
    return {lv: _level_value(profile.levels[lv - 1], values) for lv in sorted(levels)}


def level_bits(profile: Profile, level: int, segment_values: list[int | None]) -> list[int | None]:
    """Bit string (MSB first) of a level from its decoded segment values; None where undecoded."""
    b = profile.levels[level - 1].bits
    bits: list[int | None] = []
    for v in segment_values:
        for i in range(b - 1, -1, -1):
            bits.append(None if v is None else (v >> i) & 1)
    return bits


def decode_fields(profile: Profile, level: int, segment_values: list[int | None]) -> dict[str, int | None]:
    """Segment values of one level -> field values; a field touching an undecoded segment is None."""
    bits = level_bits(profile, level, segment_values)
    out: dict[str, int | None] = {}
    pos = 0
    for f in profile.levels[level - 1].fields:
        chunk = bits[pos : pos + f.bits]
        pos += f.bits
        if any(x is None for x in chunk):
            out[f.name] = None
        else:
            v = 0
            for x in chunk:
                v = (v << 1) | int(x)  # type: ignore[arg-type]
            out[f.name] = v
    return out


def value_fields(profile: Profile, level: int, value: int | None) -> dict[str, int | None]:
    """A whole level value (its fields concatenated, first most significant) -> field values."""
    out: dict[str, int | None] = {}
    fields = profile.levels[level - 1].fields
    shift = sum(f.bits for f in fields)
    for f in fields:
        shift -= f.bits
        out[f.name] = None if value is None else (value >> shift) & ((1 << f.bits) - 1)
    return out


def segments_value(profile: Profile, level: int, segment_values: list[int]) -> int:
    """Segment values (segment 0 most significant) -> the whole level value."""
    b = profile.levels[level - 1].bits
    v = 0
    for s in segment_values:
        v = (v << b) | s
    return v


def parse_field_args(profile: Profile, items: list[str]) -> dict[str, int]:
    """`name=value` strings (CLI) -> field mapping, with one-line errors."""
    values: dict[str, int] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise PayloadError(f"--field expects name=value, got {clip(item)}")
        try:
            profile.field_level(name)
        except ProfileError as exc:
            raise PayloadError(str(exc)) from None
        try:
            values[name] = int(raw, 0)
        except ValueError:
            raise PayloadError(f"field {clip(name)}: {clip(raw)} is not an integer") from None
    return values
