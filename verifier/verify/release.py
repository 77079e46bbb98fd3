"""What a caller may see, and what is recorded about it: one module for /v1/verify and decode jobs alike.

- input checks (`requested_level`, `check_texts`, `charge_quota`): the level a role may ask for, text
  limits, and the caller's quotas;
- `shape`: a decoder result as released. It copies the decoder's result through (whatever keys the
  engine reports: status, reason, fields, and any it adds later) except the bulky per-bit and
  per-segment diagnostics, and never copies a level above the caller's maximum: role filtering holds
  by construction, whatever the decoder was handed;
- `outcome` and `audit_events`: the audit record written before any result is released.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from verifier.audit.service import Actor, AuditEvent
from verifier.auth.policy import Policy
from verifier.auth.principal import Principal
from verifier.errors import Forbidden, InvalidInput, TooLarge
from verifier.ratelimit import RateLimiter

DIAGNOSTICS = frozenset({"bit_confidence", "segment_tokens", "undecoded_segments"})


def requested_level(principal: Principal, requested: int | None) -> int:
    """The level to decode: the role's maximum by default; more than that is 403."""
    level = principal.max_level if requested is None else requested
    if level > principal.max_level:
        raise Forbidden(f"level {level} not allowed for role {principal.role!r} (maximum {principal.max_level})")
    return level


def charge_quota(limiter: RateLimiter, policy: Policy, principal: Principal, n: int) -> None:
    """Counts n texts against the caller's quotas: RateLimited (429 + Retry-After) when over, nothing counted."""
    role = policy.role(principal.role)
    limiter.charge(principal.role, f"{principal.iss}:{principal.sub}", role.limits if role else None, n)


def text_limits(max_texts: int, max_chars: int) -> str:
    """Both text limits in words: every answer about one limit names the others too (one answer, not three)."""
    return f"at most {max_texts} text{'s' if max_texts != 1 else ''} per request and {max_chars} characters per text"


def check_texts(texts: Sequence[str], max_texts: int, max_chars: int) -> None:
    if len(texts) > max_texts:
        raise TooLarge(f"too many texts: {len(texts)} ({text_limits(max_texts, max_chars)})")
    for i, t in enumerate(texts):
        if len(t) > max_chars:
            raise TooLarge(f"text {i} is too long: {len(t)} characters ({text_limits(max_texts, max_chars)})")
        if not t.strip():
            raise InvalidInput(f"text {i} is empty")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"text {i} is not valid Unicode (lone surrogate)") from None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copy(v):
    """A deep copy of decoder output (JSON-like data), ~5x cheaper than copy.deepcopy: scalars are shared
    (immutable), containers are new; anything else goes through deepcopy."""
    if type(v) in _SCALARS:
        return v
    if type(v) is dict:
        return {k: _copy(x) for k, x in v.items()}
    if type(v) is list:
        return [_copy(x) for x in v]
    return copy.deepcopy(v)


def _public(d: dict) -> dict:
    return {k: _copy(v) for k, v in d.items() if k not in DIAGNOSTICS and k != "levels"}


def shape(result: dict, max_level: int) -> dict:
    """One decoder result as a caller with maximum level `max_level` may see it."""
    out = _public(result)
    out["levels"] = [_public(lv) for lv in result["levels"] if lv["level"] <= max_level]
    return out


def outcome(result: dict) -> str:
    if result["watermarked"]:
        return "watermarked"
    if result["levels"] and result["levels"][0]["status"] == "undecodable":
        return "undecodable"
    return "not-watermarked"


def named_versions(levels: Sequence[dict]) -> str | None:
    """The key versions a result names (e.g. "l1-v2,l2-v1"), None when it names none. Each carries its level, so a
    level that matched no version is simply left out (there is no version "l1-none" to show)."""
    return ",".join(lv["key_version"] for lv in levels if lv["key_version"]) or None


def audit_events(
    actor: Actor, digests: Sequence[str], results: Sequence[dict], details: Sequence[str | None] | None = None
) -> list[AuditEvent]:
    """One `verify` event per released result: levels and key versions disclosed, text digest, outcome."""
    details = details if details is not None else [None] * len(results)
    return [
        AuditEvent(
            action="verify",
            subject=actor.subject,
            role=actor.role,
            jti=actor.jti,
            levels=[lv["level"] for lv in r["levels"]],
            key_version=named_versions(r["levels"]),
            text_sha256=digest,
            outcome=outcome(r),
            detail=detail,
        )
        for digest, r, detail in zip(digests, results, details, strict=True)
    ]
