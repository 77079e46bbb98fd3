"""Attribution adapters: what each method *releases* about the 12-bit `user` field of a text.

The evaluation payload is a provider's: one constant `model` value (level 1 for HeRo) and a 12-bit
`user` per text (level 2 for HeRo; bits 12..23 of the 24-bit payload for MPAC and BiMark). An
adapter turns a decoder's output into an `Attribution`: the value released (or None), the status,
the values named by a `mixed` result, the decoder's confidence and a detection score.

Release rules (the thing false attribution is measured on):
- HeRo (v1, v2 and v3 profiles, model-free or model-aware): the engine's own per-level rule (`decoded`
  releases, `mixed` names its candidates). An engine without spec v2 marks every level with a scored
  token `decoded`, so under it the v1 profile releases a user for any text, as the v1 service did.
- MPAC, BiMark: the decoded value when the detection score exceeds a threshold set on human text
  (`gate`); they have no calibrated per-text p-value of their own.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hero_eval.generation import slug
from hero_eval.methods import (
    UNWATERMARKED,
    BaselineMethod,
    HeroMethod,
    Method,
    ModelAwareMethod,
    SynthIDMethod,
    _bits_to_int,
    build_method,
)
from verifier.engine.profile import Profile, profile_from_dict, v3_profile

USER_BITS = 12
MODEL_BITS = 12

# The v1 product default (policies/profiles/default.yaml before spec v2): HeRo^2(2,2), K_1 = 80, h = 4.
V1_DEFAULT = {
    "name": "default-v1",
    "spec_version": 1,
    "tokenizer": "smollm2",
    "vocab_size": 49152,
    "context_width": 4,
    "segments": 6,
    "routing": "contiguous",
    "levels": [
        {"bits": 2, "chunks": 80, "fields": [{"name": "model", "bits": 12}]},
        {"bits": 2, "fields": [{"name": "user", "bits": 12}]},
    ],
}
HERO_V1, HERO_V2, HERO_V3 = "HeRo-v1", "HeRo-v2", "HeRo-v3"
SYNTHID = "SynthID-Text"
HERO_V3_AWARE = HERO_V3 + ModelAwareMethod.SUFFIX
ATTR_METHODS = (HERO_V3, HERO_V3_AWARE, HERO_V2, HERO_V1, "MPAC(2)", "BiMark(20)", UNWATERMARKED)
SCHEME = "_user12"  # cache key part: payload = constant model + per-text 12-bit user


@dataclass
class Attribution:
    user: int | None  # the released value; None = nothing released
    status: str  # decoded | absent | mixed | undecodable
    score: float  # detection score, larger = more watermark-like
    candidates: tuple[int, ...] = ()  # values named by a `mixed` result, best first
    confidence: float | None = None
    best: int | None = None  # the decoder's best value, released or not
    extra: dict = field(default_factory=dict)
    model: int | None = None  # the public `model` released (HeRo: level 1's own rule; baselines: gated bits)

    def named(self) -> set[int]:
        """Every user value this result puts a name to."""
        return {self.user} if self.user is not None else set(self.candidates)


def model_value(seed: int) -> int:
    return random.Random(f"model/{seed}").getrandbits(MODEL_BITS)


def user_value(seed: int, i: int) -> int:
    return random.Random(f"user/{seed}/{i}").getrandbits(USER_BITS)


def _bits(v: int, n: int) -> list[int]:
    return [(v >> (n - 1 - k)) & 1 for k in range(n)]


def hero_model_value(profile: Profile, seed: int) -> int:
    """The `model` a HeRo profile's texts carry: model_value(seed) cut to the field's width, or under spec v4 one
    of the profile's issued model ids (generation refuses any other: docs/spec.md section 18)."""
    (lv,) = [lv for lv in profile.levels if any(f.name == "model" for f in lv.fields)]
    (f,) = [f for f in lv.fields if f.name == "model"]
    if lv.issued is not None and len(lv.fields) == 1:
        return lv.issued[model_value(seed) % len(lv.issued)]
    return model_value(seed) & ((1 << f.bits) - 1)


def payload_for(method: Method, seed: int, user: int) -> list[int]:
    """Flat payload bits carrying (model_value(seed), user) in the method's layout."""
    if isinstance(method, HeroMethod):
        values = {"model": hero_model_value(method.profile, seed), "user": user}
        bits: list[int] = []
        for lvl in method.profile.levels:
            for f in lvl.fields:
                bits.extend(_bits(values.get(f.name, 0) & ((1 << f.bits) - 1), f.bits))
        return bits
    return _bits(model_value(seed), MODEL_BITS) + _bits(user, USER_BITS)


def v2_profile() -> Profile | None:
    """The spec-v2 default profile, or None while the engine does not provide one."""
    from verifier.engine import profile as prof

    try:
        p = prof.default_profile()
    except Exception:
        return None
    return p if getattr(p, "spec_version", 1) >= 2 else None


def build_attr_method(name: str, seed: int, model=None, store: Path | None = None) -> Method | ModelAwareMethod | None:
    """The named method; a '... (model-aware)' name decodes its base method's texts with `model` (the LM),
    keeping its LM passes under `store` when given."""
    if name.endswith(ModelAwareMethod.SUFFIX):
        base = build_attr_method(name[: -len(ModelAwareMethod.SUFFIX)], seed)
        if not isinstance(base, HeroMethod) or model is None:
            return None
        return ModelAwareMethod(base, model, store=store / slug(base.name) if store is not None else None)
    if name == HERO_V3:
        return HeroMethod.from_profile(name, v3_profile(), seed)
    if name == HERO_V1:
        return HeroMethod.from_profile(name, profile_from_dict(V1_DEFAULT), seed)
    if name == HERO_V2:
        p = v2_profile()
        return HeroMethod.from_profile(name, p, seed) if p is not None else None
    if name == SYNTHID:
        return SynthIDMethod(name, seed)
    if name.startswith("HeRo-"):  # HeRo-<profile>: any profile in policies/profiles (e.g. HeRo-v4 once it exists)
        return _hero_profile(name, seed)
    return build_method(name, MODEL_BITS + USER_BITS, seed)


def hero_name(profile: str) -> str:
    """The evaluation's method name for a profile name ("v3" -> "HeRo-v3")."""
    return f"HeRo-{profile}"


def _hero_profile(name: str, seed: int) -> HeroMethod | None:
    from verifier.engine.profile import load_profile, profile_path

    path = profile_path(name[len("HeRo-"):])  # a deployment's (or research's) $HERO_PROFILES_DIR, then the shipped
    return HeroMethod.from_profile(name, load_profile(path), seed) if path.exists() else None


def attribute(method: Method | ModelAwareMethod, ids: Sequence[Sequence[int]]) -> list[Attribution]:
    if isinstance(method, HeroMethod):
        return _hero(method.profile, method._decoder, ids)
    if isinstance(method, ModelAwareMethod):
        return _hero(method.profile, method, ids)
    if isinstance(method, BaselineMethod):
        return _baseline(method, ids)
    raise TypeError(f"{method.name} carries no payload")


def _hero(profile: Profile, decoder, ids: Sequence[Sequence[int]]) -> list[Attribution]:
    from hero_eval.methods import _decode_safe

    lv = profile.field_level("user")
    mlv = profile.field_level("model")
    out = []
    for r in _decode_safe(decoder, list(ids)):
        if r is None:
            out.append(Attribution(None, "undecodable", 0.0))
            continue
        lr = r.levels[lv - 1]
        value = lr.fields.get("user")
        cands = tuple(
            c["fields"]["user"] for c in (getattr(lr, "candidates", None) or []) if c["fields"].get("user") is not None
        )
        released = value if lr.status == "decoded" else None  # the engine's own release rule
        best = value if value is not None else (cands[0] if cands else None)
        out.append(
            Attribution(
                released,
                lr.status,
                -r.log10_p_value,
                cands if lr.status == "mixed" else (),
                lr.confidence,
                best,
                {"level_log10_p": lr.log10_p_value, "flags": list(getattr(r, "flags", []) or [])},
                model=_released(r.levels[mlv - 1], "model"),
            )
        )
    return out


def _released(level_result, name: str) -> int | None:
    return level_result.fields.get(name) if level_result.status == "decoded" else None


def _baseline(method: BaselineMethod, ids: Sequence[Sequence[int]]) -> list[Attribution]:
    out = []
    for d in method.decode([list(x) for x in ids]):
        ub, mb = d.bits[MODEL_BITS : MODEL_BITS + USER_BITS], d.bits[:MODEL_BITS]
        v = None if any(b is None for b in ub) else _bits_to_int(ub)  # type: ignore[arg-type]
        mv = None if any(b is None for b in mb) else _bits_to_int(mb)  # type: ignore[arg-type]
        out.append(Attribution(v, "decoded" if v is not None else "undecodable", d.score, best=v, model=mv))
    return out


def model_truth(method: Method | ModelAwareMethod, seed: int) -> int:
    """The `model` value a method's texts carry (HeRo: cut to the profile's public field width)."""
    profile = getattr(method, "profile", None)
    if profile is None:
        return model_value(seed)
    return hero_model_value(profile, seed)


def gate(atts: Sequence[Attribution], threshold: float | None) -> list[Attribution]:
    """Release only where the detection score exceeds `threshold` (None: keep the decoder's rule)."""
    if threshold is None:
        return list(atts)
    return [
        a if a.score > threshold else replace(a, user=None, status="absent", candidates=(), model=None) for a in atts
    ]


def count_false(atts: Sequence[Attribution], allowed: Sequence[set[int]]) -> int:
    """Results that name a value outside their text's `allowed` set: empty for text that carries no user
    (human, unwatermarked), {user} for a watermarked text, {A, B} for a splice of A and B."""
    return sum(bool(a.named() - ok) for a, ok in zip(atts, allowed, strict=True))


def count_exact(atts: Sequence[Attribution], users: Sequence[int]) -> int:
    """Results that released exactly their text's user (a `mixed` or empty result is a miss)."""
    return sum(a.user is not None and a.user == u for a, u in zip(atts, users, strict=True))
