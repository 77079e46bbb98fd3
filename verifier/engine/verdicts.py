"""The engine's release rules, in one place: what a level and a text are called, and which value is released.

Every verdict a decode makes is written here (docs/spec.md sections 13 and 15.4); the evidence that feeds
them is computed elsewhere (engine/attribution.py: per-window and per-cell statistics; engine/decoder.py and
engine/weighted_decode.py: scoring). Role shaping (which of these results a caller may see) is the service's
(verifier/verify/), never decided here.

- a level's value (`decide_value`): released only when every cell is significant on its own and no second
  value is; else `mixed` (two supported values) or `detected` (significant, value withheld);
- a text (`text_verdict`): watermarked on the combined p-value or level 1's own; a text not called
  watermarked releases no value at any level;
- levels above an undecodable level 1 hang on its position key (`hang_on_level1`); a level with no usable key
  version at all is `undecodable` with its reason, and disabled versions are named where nothing was found
  (`missing_levels`, `with_availability`); an undecodable level releases no field value;
- flags on the whole result (`text_flags`: inconsistent levels, mixed sources);
- before any region is read, a level without scored tokens is `undecodable` and one whose whole text misses alpha
  with no region scan to open it is `absent` (`gate`); after the scan, `opened_level` or `absent` (the model-free
  and the weighted decoders alike);
- a level whose held versions show nothing while other versions of it are gone is `undecodable`, and a key
  version is named only where the level's own evidence is significant (`held_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from verifier.engine import stats

# A segmented value (whole text or a region) is released only if no segment's runner-up has p <= 1e-3:
# a weakly supported second value in one segment may mean the winners come from two sources. Costs
# about K x 1e-3 of single-source releases (a null runner-up's p-value is uniform).
LOG_QUIET = math.log(1e-3)
# A prefix/suffix region may open a level whose whole-text p-value misses alpha (spec v3, mixed texts), at
# alpha / (m + 1); the scan runs only for texts whose whole-text level p-value shows at least this much
# evidence, so the path of human text (nearly all p > 1e-2) stays as cheap as before. Skipping the scan
# can only withhold, never release.
LOG_SCAN_GATE = math.log(1e-2)
NO_TOKENS = "no scored tokens (text too short or fully repetitive)"


@dataclass(frozen=True)
class Candidate:
    value: int
    log_p: float
    tokens: int


@dataclass(frozen=True)
class Span:
    start: int  # scored-token rank, inclusive
    end: int  # exclusive
    value: int


@dataclass
class Attribution:
    status: str  # decoded | detected (significant, value withheld) | absent | mixed | undecodable
    log_p: float  # the level's whole-text p-value (log), versions included
    value: int | None = None  # whole level value (segments concatenated, segment 0 most significant)
    confidence: float = 0.0
    bit_confidence: list[float | None] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    reason: str | None = None
    most_likely: int | None = None  # whole-text argmax value, supported or not (evaluation only)


class Region(Protocol):
    """A text's whole-text or prefix/suffix region as `decide_value` reads it (engine/attribution.py `_Region`)."""

    lo: int  # windows [lo, hi)
    hi: int
    n: list[int]  # scored tokens per cell
    winners: list[int]
    log_p1: list[float]  # per cell: the winner's max-of-C tail
    log_p2: list[float]  # per cell: the runner-up's
    level_lp: float
    runner: int

    @property
    def tokens(self) -> int: ...


def join_cells(winners: list[int], bits: int) -> int:
    """One level value from its cells' values (`bits` each, cell 0 most significant)."""
    v = 0
    for w in winners:
        v = (v << bits) | w
    return v


def decide_value(full: Region, regions: list[Region], windows: int, per_value: bool, log_v: float, level_lp: float,
            log_alpha: float, cell_bits: int) -> tuple[Attribution, Region | None]:
    """One text whose level p-value passed alpha: which value(s) its whole text and regions support, and
    for a released value the region it comes from (its confidence is computed for the batch)."""
    scan = log_v + (math.log(2 * (windows - 1) + 1) if windows > 1 else 0.0)
    cells = len(full.winners)
    cell_alpha = log_alpha - math.log(cells)  # per-cell threshold: alpha / K (alpha for one cell)

    def supported(r: Region, extra: float) -> bool:
        return all(n > 0 and lp + extra <= cell_alpha for lp, n in zip(r.log_p1, r.n, strict=True))

    def clean(r: Region, extra: float) -> bool:
        return all(lp + extra > cell_alpha for lp, n in zip(r.log_p2, r.n, strict=True) if n > 0)

    def quiet(r: Region) -> bool:
        """No segment's runner-up is even weakly significant: releasing a segmented value needs this."""
        return all(lp > LOG_QUIET for lp, n in zip(r.log_p2, r.n, strict=True) if n > 0)

    found: dict[int, Candidate] = {}
    by_region: dict[tuple[int, int], tuple[int, float]] = {}

    def add(value: int, log_p: float, tokens: int) -> None:
        if value not in found or log_p < found[value].log_p:
            found[value] = Candidate(value, min(0.0, log_p), tokens)

    two_in_a_cell = not clean(full, scan)
    # A segmented level's winners may come from different sources when a segment holds two: then the
    # whole-text value is not released (it could be a value neither source carried).
    whole_ok = supported(full, log_v) and (per_value or quiet(full))
    full_value = join_cells(full.winners, cell_bits) if whole_ok else None
    if full_value is not None:
        add(full_value, level_lp, full.tokens)
    if per_value and two_in_a_cell:  # the runner-up is a second supported value
        add(full.runner, full.log_p2[0] + scan, full.tokens)
    for r in regions:
        if r.tokens and supported(r, scan) and (per_value or quiet(r)):
            v = join_cells(r.winners, cell_bits)
            lp = r.log_p1[0] + scan if per_value else r.level_lp + scan
            add(v, lp, r.tokens)
            by_region[(r.lo, r.hi)] = (v, lp)
    ranked = sorted(found.values(), key=lambda c: c.log_p)
    if len(ranked) >= 2 or two_in_a_cell:
        if not per_value:
            # Segment winners of a mixed text may pair segments of different sources: name no value.
            return Attribution("mixed", level_lp, reason=(
                "two or more sources: some segments carry two supported values; a segmented level cannot "
                "attribute whole values to them")), None
        return Attribution("mixed", level_lp, candidates=ranked, spans=_spans(by_region, windows, full.tokens),
                           reason="two or more values are each supported by their own evidence"), None
    if not ranked:
        weak = [k for k, (lp, n) in enumerate(zip(full.log_p1, full.n, strict=True))
                if n == 0 or lp + log_v > cell_alpha]
        # `detected`, not `absent`: the level's own evidence is significant, only its value is withheld
        return Attribution("detected", level_lp, reason=(
            f"value withheld: watermark evidence for this level (p = {stats.to_p(level_lp):.3g}) but segments "
            f"{weak} lack their own evidence")), None
    value = ranked[0].value
    source = full if full_value == value else next(
        r for r in regions if by_region.get((r.lo, r.hi), (None,))[0] == value)
    return Attribution("decoded", level_lp, value=value), source


def _spans(by_region: dict[tuple[int, int], tuple[int, float]], windows: int, n: int) -> list[Span]:
    """One change point: the window boundary whose prefix and suffix name two different values with the
    strongest joint evidence (smallest sum of their log p-values); `n` scored tokens in all."""
    best = None
    for j in range(1, windows):
        a, b = by_region.get((0, j)), by_region.get((j, windows))
        if a is None or b is None or a[0] == b[0]:
            continue
        if best is None or a[1] + b[1] < best[0]:
            best = (a[1] + b[1], j, a[0], b[0])
    if best is None:
        return []
    _, j, a, b = best
    cut = -(-j * n // windows)  # first scored rank of window j: ceil(j n / W)
    return [Span(0, cut, a), Span(cut, n, b)]


def not_significant(log_p: float, log_alpha: float) -> str:
    """The reason of an `absent` level: its p-value misses alpha. Not "no evidence": p = 0.005 is some evidence,
    too little to call the level watermarked or to name a value."""
    return (f"not significant: p = {stats.to_p(log_p):.3g} does not reach alpha = {stats.to_p(log_alpha):.3g} "
            "(too little evidence to call this level watermarked; not a finding that it is unmarked)")


def unscored() -> Attribution:
    """A level with no scored token: nothing to decide on (`undecodable`)."""
    return Attribution("undecodable", 0.0, reason=NO_TOKENS)


def absent(log_p: float, log_alpha: float) -> Attribution:
    """A level that is not open at alpha: `absent`, with its p-value and why."""
    return Attribution("absent", log_p, reason=not_significant(log_p, log_alpha))


def gate(tokens: int, level_lp: float, log_alpha: float, windows: int) -> Attribution | None:
    """The verdict a level gets before its prefix/suffix regions are read, or None when they must be: no scored
    tokens is `undecodable`; a whole text that misses alpha is `absent` when no region scan may open it (one
    window, or a whole-text p-value above the scan gate). Both decoders call it, so the cheap path of human text
    and its reasons are the same for model-free and model-aware scoring."""
    if tokens == 0:
        return unscored()
    if level_lp > log_alpha and (windows == 1 or level_lp > LOG_SCAN_GATE):
        return absent(level_lp, log_alpha)
    return None


def opened_level(level_lp: float, regions: Sequence[Region], windows: int, log_v: float,
                 log_alpha: float) -> float | None:
    """The level's log p-value if the level is open, else None (then `absent`). Open: the whole text's (versions
    included) is <= alpha, or some prefix/suffix region's level p-value is <= alpha / (m + 1) (m = 2(W-1) regions,
    versions included): then the level reports min(whole text, corrected region). Under the null each of the
    two tests passes with probability <= alpha, so the level opens with probability <= 2 alpha (the release
    bound of spec 13.3); the values it may release are still tested region by region at alpha / (m + 1)."""
    if level_lp <= log_alpha:
        return level_lp
    scan = log_v + math.log(2 * (windows - 1) + 1)
    best = min((r.level_lp + scan for r in regions if r.tokens), default=0.0)
    return min(0.0, best) if best <= log_alpha else None


def held_verdict(att: Attribution, alpha: float, gone: str | None) -> tuple[str, str | None, bool]:
    """(status, reason, whether the version is named) of a level decided on the versions still held; `gone`: why
    others of its versions are gone (None: none is). A version is named only where this level's own evidence is
    significant: otherwise the smallest of several null p-values picks one by chance (spec 13.2: an absent level
    releases nothing). With no evidence under the held versions, the gone ones may have made the text:
    `undecodable`, for the reason they are gone (an `absent` level with significant evidence was made with a held
    version: it stays `absent`)."""
    matched = att.status != "undecodable" and att.log_p <= math.log(alpha)
    if gone is not None and att.status == "absent" and not matched:
        return "undecodable", gone, matched
    return att.status, att.reason, matched


@dataclass
class LevelResult:
    level: int
    key_version: str | None
    fields: dict[str, int | None] | None  # None: a level with no usable key version (`missing_levels`)
    confidence: float  # probability that the released value is exactly right (0.0 when none is released)
    p_value: float
    log10_p_value: float
    bit_confidence: list[float | None]
    segment_tokens: list[int]
    undecoded_segments: list[int]
    versions_tried: int
    status: str = "decoded"  # decoded | detected (significant, value withheld) | absent | mixed | undecodable
    reason: str | None = None
    candidates: list[dict] | None = None  # mixed: [{"fields", "p_value", "tokens"}], best first
    spans: list[dict] | None = None  # mixed: [{"start", "end", "fields"}] token positions, end exclusive
    # The whole-text argmax value whether or not the evidence supports it: the paper's bit-accuracy metric
    # (evaluation only). Never serialized (to_dict drops it), never released to a caller.
    most_likely: int | None = None
    # Values this level's search covered (its p-value is corrected for them): a spec v4 level's issued count,
    # else every value of a per-value level (2^bits); a segmented level: values per segment (2^b).
    searched: int | None = None

    def to_dict(self) -> dict:
        """Plain data for release: every field but `most_likely`."""
        return {
            "level": self.level, "key_version": self.key_version,
            "fields": None if self.fields is None else dict(self.fields),  # None: a level with no usable key
            "confidence": self.confidence, "p_value": self.p_value, "log10_p_value": self.log10_p_value,
            "bit_confidence": list(self.bit_confidence), "segment_tokens": list(self.segment_tokens),
            "undecoded_segments": list(self.undecoded_segments), "versions_tried": self.versions_tried,
            "status": self.status, "reason": self.reason, "searched": self.searched,
            "candidates": None if self.candidates is None else [
                {**c, "fields": dict(c["fields"])} for c in self.candidates],
            "spans": None if self.spans is None else [{**sp, "fields": dict(sp["fields"])} for sp in self.spans],
        }


@dataclass
class DecodeResult:
    watermarked: bool
    p_value: float
    log10_p_value: float
    key_version: str | None
    tokens_scored: int
    levels: list[LevelResult] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    spec_version: int = 1
    scoring: str = "model-free"  # model-free (equal weights) | model-aware (engine/weighted_decode.py)

    def to_dict(self) -> dict:
        """Plain data (what `dataclasses.asdict` gives, without `most_likely`): fresh containers all the way
        down, written out because asdict's recursive deep copy costs more than the decode of a text."""
        return {
            "watermarked": self.watermarked, "p_value": self.p_value, "log10_p_value": self.log10_p_value,
            "key_version": self.key_version, "tokens_scored": self.tokens_scored,
            "levels": [lv.to_dict() for lv in self.levels], "flags": list(self.flags),
            "spec_version": self.spec_version, "scoring": self.scoring,
        }


INCONSISTENT_P = 0.01
INCONSISTENT_TOKENS = 100


def text_flags(levels: list[LevelResult]) -> list[str]:
    flags = []
    n = sum(levels[0].segment_tokens)
    if levels[0].status == "decoded" and n >= INCONSISTENT_TOKENS and any(
            lv.status == "absent" and lv.p_value >= INCONSISTENT_P for lv in levels[1:]):
        # level 1 names a value while a deeper held level shows no sign of its mark (p >= 0.01 over >= 100
        # scored tokens): made by someone holding only level-1 keys, or heavily edited
        flags.append("inconsistent-levels")
    if any(lv.status == "mixed" for lv in levels):
        flags.append("mixed-sources")
    return flags


def text_verdict(levels: list[LevelResult], n_scored: int, alpha: float) -> tuple[bool, float]:
    """(watermarked, log p) of a whole text from its level results, for every scoring: the text p-value is
    `stats.log_text_p` of the levels', and level 1's own verdict stands for every role (spec 15.4), so an
    auditor never sees less than a moderator. A text not called watermarked releases no value: a deeper
    level's value is withheld there (`detected`), so no result names a user on a text it calls unmarked
    (spec 15.4; docs/research/2026-11-spec-v3-notes.md, measured 2026-11-28)."""
    level_log_ps = [lv.log10_p_value * math.log(10.0) for lv in levels]
    log_p = stats.log_text_p(level_log_ps)
    detected = stats.to_p(log_p) <= alpha or stats.to_p(level_log_ps[0]) <= alpha
    watermarked = n_scored > 0 and detected
    if not watermarked:
        for lv in levels[1:]:
            if lv.status in ("decoded", "mixed"):
                withhold(lv, f"value withheld: this level's evidence is significant (p = {lv.p_value:.3g}) but "
                              f"the text's is not (p = {stats.to_p(log_p):.3g}): no value on a text not called "
                              "watermarked")
    return watermarked, log_p


def drop_value(lv: LevelResult) -> None:
    """No value stays in `lv`: fields null, no candidates, spans or confidence."""
    lv.fields = dict.fromkeys(lv.fields) if lv.fields is not None else None
    lv.candidates = lv.spans = None
    lv.confidence = 0.0


def withhold(lv: LevelResult, reason: str) -> None:
    """`lv` becomes `detected` (significant, no value): nothing of a value stays in it."""
    drop_value(lv)
    lv.status, lv.reason = "detected", reason
    lv.bit_confidence = [None] * len(lv.bit_confidence)

def hang_on_level1(levels: list[LevelResult], unavailable: Mapping[int, str]) -> None:
    """Deeper levels hang on level 1's position key: without the version that made the text (level 1
    undecodable because its versions are gone), their values are meaningless (their evidence stays in p_value)."""
    if levels[0].status == "undecodable" and levels[0].level in unavailable:
        for lv in levels[1:]:
            drop_value(lv)
            lv.status, lv.key_version = "undecodable", None
            lv.reason = lv.reason or f"level 1 cannot be decoded ({levels[0].reason})"


def missing_levels(missing: Mapping[int, str]) -> list[LevelResult]:
    return [
        LevelResult(
            level=level, key_version=None, fields=None, confidence=0.0, p_value=1.0,
            log10_p_value=0.0, bit_confidence=[], segment_tokens=[], undecoded_segments=[], versions_tried=0,
            status="undecodable", reason=reason,
        )
        for level, reason in sorted(missing.items())
    ]


def with_availability(
    result: DecodeResult, alpha: float, missing: Mapping[int, str], not_tried: Mapping[int, str]
) -> DecodeResult:
    """The decoder already made the verdicts for versions it was told are gone (`unavailable`); add the
    levels with no usable version at all, and name the disabled versions not tried where nothing was found."""
    for lv in result.levels:
        why = not_tried.get(lv.level)
        if why and lv.p_value > alpha:
            lv.reason = f"{lv.reason}; {why}" if lv.reason else why
    result.levels.extend(missing_levels(missing))
    for lv in result.levels:
        if lv.status == "undecodable" and lv.fields is not None:
            lv.fields = dict.fromkeys(lv.fields)
    return result
