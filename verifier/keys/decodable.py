"""Which key versions may decode, and why the others cannot (destroyed or disabled versions).

The decoder needs levels 1..n without gaps: a level with no usable version makes it and every deeper
level `missing` (with the reason); a level with some versions gone keeps its usable ones and the reason
(`unavailable`), so the engine can tell a caller why a text made with a gone version no longer decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from verifier.engine.keys import KeyTable
from verifier.keys.models import KeyVersionRow

USABLE_FOR_DECODING = ("active", "verify-only")


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="seconds")


@dataclass(repr=False)
class VerificationMaterial:
    """Key tables for levels 1..n (no gaps) plus reasons for versions that can no longer decode."""

    tables: dict[int, list[KeyTable]]
    unavailable: dict[int, str]  # level -> reason (some versions destroyed/disabled)
    missing: dict[int, str]  # level -> reason (no usable version at all: level not decodable)

    def __repr__(self) -> str:
        return f"VerificationMaterial(levels={sorted(self.tables)}, missing={sorted(self.missing)})"


@dataclass
class DecodablePlan:
    usable: dict[int, list[KeyVersionRow]]  # level -> versions to decrypt and hand to the decoder
    unavailable: dict[int, str]
    missing: dict[int, str]


def decodable_versions(rows: Sequence[KeyVersionRow], top: int) -> DecodablePlan:
    """Sort the version rows of levels 1..top into usable / unavailable / missing."""
    plan = DecodablePlan({}, {}, {})
    for lv in range(1, top + 1):
        lrows = [r for r in rows if r.level == lv]
        reason = _gone_reason([r for r in lrows if r.status in ("destroyed", "disabled")])
        usable = [r for r in lrows if r.status in USABLE_FOR_DECODING]
        if plan.missing or not usable:  # the decoder needs levels 1..n without gaps
            plan.missing[lv] = reason or (
                f"no usable key for level {lv}" if not plan.missing else f"level {min(plan.missing)} cannot be decoded"
            )
            continue
        plan.usable[lv] = usable
        if reason:
            plan.unavailable[lv] = reason
    return plan


def _gone_reason(rows: list[KeyVersionRow]) -> str | None:
    parts = []
    destroyed = [r for r in rows if r.status == "destroyed"]
    disabled = [r for r in rows if r.status == "disabled"]
    if destroyed:
        parts.append(
            "key version(s) "
            + ", ".join(f"{r.version} destroyed on {iso(r.destroyed_at)}" for r in destroyed)
            + "; text made with them can no longer be decoded"
        )
    if disabled:
        parts.append(
            "key version(s) " + ", ".join(r.version for r in disabled) + " disabled; text made with them is not decoded"
        )
    return "; ".join(parts) or None
