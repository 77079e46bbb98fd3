"""What a caller may see, and what is recorded about it: one module for /v1/verify and decode jobs alike.

- `shape`: a decoder result as released. It copies the decoder's result through (whatever keys the
  engine reports: status, reason, fields, and any it adds later) except the bulky per-bit and
  per-segment diagnostics, and never copies a level above the caller's maximum: role filtering holds
  by construction, whatever the decoder was handed;
- `bonferroni`: an answer's p-values corrected for k tries (profiles tried, values asked), in their released form;
- `outcome` and `audit_events`: the audit record written before any result is released; each `verify` event
  binds the result as released (`result_sha256=<hex>` in its detail: see `released_digest`), so its receipt
  proves what was served, not only which text was asked about.

What a request must pass before any of this (bounds, token checks, quota) is verify/admission.py's; the level is
granted once per request by `Policy.grant` (verifier.auth.policy).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from pydantic import TypeAdapter

from verifier.audit.service import Actor, AuditEvent
from verifier.audit.transparency import RESULT_DIGEST_KEY, result_digest
from verifier.verify.schemas import ResultOut

DIAGNOSTICS = frozenset({"bit_confidence", "segment_tokens", "undecoded_segments"})
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


def shape(result: dict, level: int) -> dict:
    """One decoder result as a caller granted levels 1..`level` may see it."""
    out = _public(result)
    out["levels"] = [_public(lv) for lv in result["levels"] if lv["level"] <= level]
    return out


def bonferroni(entry: dict, k: int) -> None:
    """Corrects an answer's p-values for `k` tries, in place, each in the form it is released: `p_value` x k
    (capped at 1) and, where present, `log10_p_value` + log10 k (capped at 0). Never through exp/log, which moves
    p's last digits: with k = 1 both stay exactly as the engine gave them."""
    entry["p_value"] = min(1.0, entry["p_value"] * k)
    if "log10_p_value" in entry:
        entry["log10_p_value"] = min(0.0, entry["log10_p_value"] + math.log10(k))


def outcome(result: dict) -> str:
    if result["watermarked"]:
        return "watermarked"
    if result["levels"] and result["levels"][0]["status"] == "undecodable":
        return "undecodable"
    return "not-watermarked"


_RESULT = TypeAdapter(ResultOut)


def released_digest(result: dict) -> str:
    """`result_digest` of a shaped result as the API serves it: through ResultOut (its defaults filled in, keys
    it does not declare dropped), in JSON types, so a client recomputes it from the response body."""
    return result_digest(_RESULT.dump_python(_RESULT.validate_python(result), mode="json"))


def _bind(detail: str | None, result: dict) -> str:
    bound = f"{RESULT_DIGEST_KEY}={released_digest(result)}"
    return bound if detail is None else f"{detail} {bound}"


def named_versions(levels: Sequence[dict]) -> str | None:
    """The key versions a result names (e.g. "l1-v2,l2-v1"), None when it names none. Each carries its level, so a
    level that matched no version is simply left out (there is no version "l1-none" to show)."""
    return ",".join(lv["key_version"] for lv in levels if lv["key_version"]) or None


def audit_events(
    actor: Actor, digests: Sequence[str], results: Sequence[dict], details: Sequence[str | None] | None = None,
    action: str = "verify",
) -> list[AuditEvent]:
    """One event per released result (`verify`; `decode` for `hero decode`): levels and key versions disclosed,
    text digest, outcome."""
    details = details if details is not None else [None] * len(results)
    return [
        AuditEvent.of(
            actor, action, [lv["level"] for lv in r["levels"]],
            named_versions(r["levels"]), digest, outcome(r),
            _bind(detail, r),
        )
        for digest, r, detail in zip(digests, results, details, strict=True)
    ]
