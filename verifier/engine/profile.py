"""Watermark profile: vocabulary, context width, levels, chunk schedule and named payload fields.

Profiles are data (YAML under `policies/profiles/`), validated here with messages a user can act on.
Notation follows the paper: HeRo^L(b_1..b_L), K segments, chunk schedule K_1..K_{L-1}.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from verifier.base.resources import project_root

DEFAULT_FIRST_CHUNKS = 20
DEFAULT_DEEPER_CHUNKS = 4
SPEC_VERSIONS = (1, 2, 3, 4, 5)
ENCODINGS = ("segments", "value")
MAX_VALUE_BITS = 16  # a per-value level is decoded by trying all 2^bits values
# The profile a NEW deployment (no keys yet, no HERO_PROFILE) is set up with: the best spec this release ships
# (spec v5: docs/evaluation/chat.md; `hero keys init --models 37,41` makes it the deployment's own copy that issues
# those model ids).
# An existing deployment keeps the profile its keys were made with (verifier/keys/deployment.py). One line to
# change when a better profile ships.
NEW_DEPLOYMENT_PROFILE = "v5"
V2_WINDOWS = 8  # spec v2: scored tokens are scored in 8 windows (prefix/suffix scans of mixed texts)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
PROFILES_DIR_ENV = "HERO_PROFILES_DIR"  # a deployment's own profiles, searched before the shipped ones


class ProfileError(ValueError):
    """A profile (or a payload against it) is malformed; the message says what to fix."""


MULTIPLEX_LANES = 100  # spec v5: a scored position's lane q in 0..99 (word 0 of its position stream, scaled)


@dataclass(frozen=True)
class Multiplex:
    """Spec v5 (docs/spec.md section 19): which level each marked position carries, by the generator's index t.

    A position's lane q (0..99, from the level-1 position key) is public when q < `public_percent(t)`: the first
    `front_tokens` tokens of a response use `front_public`, later ones `public`. Non-public lanes are split evenly
    among the deeper levels. Percent integers, so every backend compares integers (no rounding to agree on)."""

    front_tokens: int
    front_public: int
    public: int

    def public_percent(self, t: int) -> int:
        """Share of public lanes (percent) at generator index t (0-based)."""
        return self.front_public if t < self.front_tokens else self.public

    @property
    def hypotheses(self) -> tuple[str, ...]:
        """What a verifier reads (it does not know the generator's index): `verbatim` (text index = generator
        index) and, when the front differs from the rest, `excerpt` (every position at the late share)."""
        if self.front_tokens == 0 or self.front_public == self.public:
            return ("verbatim",)
        return ("verbatim", "excerpt")

    def level_of(self, lane: int, percent: int, depth: int) -> int:
        """1-based level of a lane at a public share `percent` in a profile of `depth` levels."""
        if lane < percent:
            return 1
        return 2 + (lane - percent) * (depth - 1) // (MULTIPLEX_LANES - percent)


@dataclass(frozen=True)
class Field:
    name: str
    bits: int


@dataclass(frozen=True)
class Level:
    bits: int  # per position segment; a level carries bits x segments payload bits
    fields: tuple[Field, ...]
    chunks: int | None = None  # K_l for routing levels; None for the last level
    # segments: one key per 2-bit (b-bit) segment value, chosen per token by the position key (v1);
    # value: one key per whole level value, decoded by maximum likelihood over all values (v2 private)
    encoding: str = "segments"
    segments: int = 1
    # spec v4 (docs/spec.md section 18): the whole values a deployment has issued at a per-value level, sorted.
    # The decoder searches only these (its correction counts them); generation refuses any other value.
    issued: tuple[int, ...] | None = None

    @property
    def per_value(self) -> bool:
        return self.encoding == "value"

    @property
    def value_bits(self) -> int:
        """Payload bits of the level (all its fields)."""
        return self.bits * self.segments

    @property
    def key_bits(self) -> int:
        """log2 of the key-table size: one key per segment value, or per whole level value."""
        return self.value_bits if self.per_value else self.bits

    @property
    def searched(self) -> int:
        """How many values a decoder searches at this level (the count its level p-value is corrected for):
        the issued values under spec v4, else every value of a per-value level (2^bits per segment cell)."""
        return len(self.issued) if self.issued is not None else 1 << self.key_bits


@dataclass(frozen=True)
class Profile:
    name: str
    vocab_size: int
    segments: int
    levels: tuple[Level, ...]
    context_width: int = 4
    tokenizer: str = "smollm2"
    spec_version: int = 1
    routing: str = "contiguous"  # vocabulary layout for chunk routing: contiguous | interleaved
    # `tokenizer` is a built-in name (verifier/lm.py), a Hugging Face hub id or a local directory; a hub id's
    # revision pin, and the SHA-256 of the tokenizer the keys were made with (a different one is refused)
    tokenizer_revision: str | None = None
    tokenizer_fingerprint: str | None = None
    multiplex: Multiplex | None = None  # spec v5: position-multiplexed levels (section 19)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # `tokenizer` as the file writes it when load_profile resolved it (a directory relative to the profile's
    # folder, `./tok` or `../tokenizers/own`): what to_dict writes back, so the file and its digest stay put
    tokenizer_written: str | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def depth(self) -> int:
        return len(self.levels)

    @property
    def schedule(self) -> tuple[int, ...]:
        """Chunk schedule (K_1, ..., K_{L-1}); empty under spec v5 (every level draws whole tokens)."""
        if self.multiplex is not None:
            return ()
        return tuple(int(lv.chunks) for lv in self.levels[:-1])  # type: ignore[arg-type]

    @property
    def windows(self) -> int:
        """Windows of scored tokens the decoder scores separately (1 in v1: whole-text sums only)."""
        return V2_WINDOWS if self.spec_version >= 2 else 1

    @property
    def routing_stride(self) -> int:
        """Stride of the interleaved layout (K_1), or 0 for the paper's contiguous chunks."""
        return self.schedule[0] if self.routing == "interleaved" and self.schedule else 0

    @property
    def bits_per_level(self) -> tuple[int, ...]:
        return tuple(lv.bits for lv in self.levels)

    @property
    def total_bits(self) -> int:
        return self.segments * sum(self.bits_per_level)

    def level_payload_bits(self, level: int) -> int:
        """Payload bits carried by `level` (1-based): segments x b_l."""
        return self.segments * self.levels[level - 1].bits

    def field_level(self, name: str) -> int:
        for i, lv in enumerate(self.levels, start=1):
            if any(f.name == name for f in lv.fields):
                return i
        raise ProfileError(f"unknown field {name!r}; profile {self.name!r} has {self.field_names()}")

    def field_names(self) -> list[str]:
        return [f.name for lv in self.levels for f in lv.fields]

    def label(self) -> str:
        return f"HeRo{self.depth}({','.join(str(b) for b in self.bits_per_level)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec_version": self.spec_version,
            "vocab_size": self.vocab_size,
            "context_width": self.context_width,
            "segments": self.segments,
            "tokenizer": self.tokenizer_written or self.tokenizer,
            **({"revision": self.tokenizer_revision} if self.tokenizer_revision is not None else {}),
            **({"tokenizer_fingerprint": self.tokenizer_fingerprint} if self.tokenizer_fingerprint else {}),
            "routing": self.routing,
            **({"multiplex": {"front_tokens": self.multiplex.front_tokens, "front_public": self.multiplex.front_public,
                              "public": self.multiplex.public}} if self.multiplex is not None else {}),
            "levels": [
                {
                    "bits": lv.bits,
                    **({"chunks": lv.chunks} if lv.chunks is not None else {}),
                    **({"encoding": lv.encoding} if self.spec_version >= 2 else {}),
                    **({"issued": list(lv.issued)} if lv.issued is not None else {}),
                    "fields": [{"name": f.name, "bits": f.bits} for f in lv.fields],
                }
                for lv in self.levels
            ],
        }


def profile_digest(profile: Profile) -> str:
    """SHA-256 (hex) of the profile's definition as its file writes it (`to_dict`, the tokenizer as written) in RFC
    8785 (JCS) canonical JSON: what the key store records beside keys made for it."""
    import hashlib

    import rfc8785

    return hashlib.sha256(rfc8785.dumps(profile.to_dict())).hexdigest()


# The keys a profile file may use at each level of its mapping (spec v5's `multiplex` checks its own): anything
# else is refused, named, so a misspelt key (`tokeniser:`) never loads silently with the default it meant to change.
TOP_KEYS = ("name", "spec_version", "vocab_size", "context_width", "segments", "tokenizer", "revision",
            "tokenizer_fingerprint", "routing", "multiplex", "levels")
LEVEL_KEYS = ("bits", "chunks", "encoding", "issued", "fields")
FIELD_KEYS = ("name", "bits")


def _known_keys(raw: dict[Any, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (a profile's keys here: {', '.join(allowed)})"
        raise ProfileError(f"{where}: unknown key {unknown[0]!r}{hint}")


def _int(d: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if v is None:
        raise ProfileError(f"{where}: missing '{key}'")
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProfileError(f"{where}: '{key}' must be an integer, got {v!r}")
    return v


def _fields(raw_fields: Any, lw: str, where: str, seen: set[str]) -> tuple[Field, ...]:
    if not isinstance(raw_fields, list) or not raw_fields:
        raise ProfileError(f"{lw}: 'fields' must be a non-empty list")
    fields: list[Field] = []
    for rf in raw_fields:
        if not isinstance(rf, dict):
            raise ProfileError(f"{lw}: each field must be a mapping with name and bits")
        fname = rf.get("name")
        if not isinstance(fname, str) or not _NAME_RE.match(fname):
            raise ProfileError(f"{lw}: field name {fname!r} must match {_NAME_RE.pattern}")
        _known_keys(rf, FIELD_KEYS, f"{lw} field {fname!r}")
        if fname in seen:
            raise ProfileError(f"{where}: field {fname!r} is defined twice")
        seen.add(fname)
        fbits = _int(rf, "bits", f"{lw} field {fname!r}")
        if fbits < 1:
            raise ProfileError(f"{lw} field {fname!r}: bits must be >= 1")
        fields.append(Field(fname, fbits))
    return tuple(fields)


def _level(raw: Any, i: int, last: bool, segments: int, where: str, seen: set[str], spec_version: int) -> Level:
    """Level i (1-based): bits, chunks (all but the last level route into chunks), fields, encoding."""
    lw = f"{where} level {i}"
    if not isinstance(raw, dict):
        raise ProfileError(f"{lw}: must be a mapping")
    _known_keys(raw, LEVEL_KEYS, lw)
    bits = _int(raw, "bits", lw)
    if not 1 <= bits <= 8:
        raise ProfileError(f"{lw}: bits must be in 1..8 (2^bits candidates are tried per segment)")
    chunks: int | None = None
    if spec_version >= 5:
        if "chunks" in raw:
            raise ProfileError(f"{lw}: spec v5 routes nothing (each position's level draws a whole token): no 'chunks'")
        if raw.get("encoding", "value") != "value":
            raise ProfileError(f"{lw}: every spec v5 level is per value (encoding: value)")
    elif not last:
        chunks = _int(raw, "chunks", lw, DEFAULT_FIRST_CHUNKS if i == 1 else DEFAULT_DEEPER_CHUNKS)
        if chunks < 2:
            raise ProfileError(f"{lw}: chunks must be >= 2")
    elif "chunks" in raw:
        raise ProfileError(f"{lw}: the last level samples inside its chunk and takes no 'chunks'")
    raw_fields = raw.get("fields")
    if raw_fields is None:
        raw_fields = [{"name": f"level{i}", "bits": bits * segments}]
    fields = _fields(raw_fields, lw, where, seen)
    total = sum(f.bits for f in fields)
    if total != bits * segments:
        raise ProfileError(f"{lw}: fields hold {total} bits but the level carries bits x segments = {bits * segments}")
    encoding = raw.get("encoding", "value" if spec_version >= 5 else "segments" if spec_version == 1 or i == 1
                       else "value")
    if encoding not in ENCODINGS:
        raise ProfileError(f"{lw}: encoding must be one of {ENCODINGS}, got {encoding!r}")
    if encoding == "value" and spec_version < 2:
        raise ProfileError(f"{lw}: encoding 'value' needs spec_version 2")
    if encoding == "value" and i == 1 and spec_version < 3:
        raise ProfileError(f"{lw}: a per-value level 1 (maximum-likelihood public value) needs spec_version 3")
    if encoding == "value" and bits * segments > MAX_VALUE_BITS:
        raise ProfileError(
            f"{lw}: a per-value level is decoded over all 2^bits values; {bits * segments} bits exceeds "
            f"{MAX_VALUE_BITS}"
        )
    issued = _issued(raw, lw, encoding, bits * segments, spec_version)
    return Level(bits=bits, fields=fields, chunks=chunks, encoding=encoding, segments=segments, issued=issued)


MAX_ISSUED = 1024  # an issued list is a deployment's registered values (model ids), not a field's whole range


def _issued(raw: dict[str, Any], lw: str, encoding: str, value_bits: int, spec_version: int) -> tuple[int, ...] | None:
    """Spec v4's `issued`: a non-empty list of distinct whole values of a per-value level."""
    if "issued" not in raw:
        return None
    if spec_version < 4:
        raise ProfileError(f"{lw}: 'issued' (search only the issued values) needs spec_version 4")
    if encoding != "value":
        raise ProfileError(f"{lw}: 'issued' applies to a per-value level (encoding: value)")
    vals = raw["issued"]
    if not isinstance(vals, list) or not vals or len(vals) > MAX_ISSUED:
        raise ProfileError(f"{lw}: 'issued' must be a list of 1..{MAX_ISSUED} values")
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << value_bits) for v in vals):
        raise ProfileError(f"{lw}: every issued value must be an integer in 0..{(1 << value_bits) - 1}")
    if len(set(vals)) != len(vals):
        raise ProfileError(f"{lw}: 'issued' lists a value twice")
    return tuple(sorted(vals))


def profile_from_dict(data: dict[str, Any]) -> Profile:
    """Build and validate a profile; every rule that decoding relies on is checked here, and every key is one a
    profile has (TOP_KEYS, LEVEL_KEYS, FIELD_KEYS, multiplex's three): an unknown one is refused, named."""
    if not isinstance(data, dict):
        raise ProfileError("profile must be a mapping")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ProfileError("profile: missing 'name'")
    where = f"profile {name!r}"
    _known_keys(data, TOP_KEYS, where)
    spec_version = _int(data, "spec_version", where, 1)
    if spec_version not in SPEC_VERSIONS:
        raise ProfileError(f"{where}: spec_version {spec_version} is not supported (this release implements 1-5)")
    vocab = _int(data, "vocab_size", where)
    h = _int(data, "context_width", where, 4)
    segments = _int(data, "segments", where)
    if vocab < 2:
        raise ProfileError(f"{where}: vocab_size must be >= 2")
    if not 1 <= h <= 16:
        raise ProfileError(f"{where}: context_width must be in 1..16")
    if not 1 <= segments <= 4096:
        raise ProfileError(f"{where}: segments must be in 1..4096")
    raw_levels = data.get("levels")
    if not isinstance(raw_levels, list) or not raw_levels:
        raise ProfileError(f"{where}: 'levels' must be a non-empty list")
    seen: set[str] = set()
    levels = tuple(
        _level(raw, i, i == len(raw_levels), segments, where, seen, spec_version)
        for i, raw in enumerate(raw_levels, start=1)
    )
    multiplex = _multiplex(data, where, spec_version, len(levels))
    routed = math.prod(lv.chunks or 1 for lv in levels[:-1])
    if routed > vocab:
        raise ProfileError(
            f"{where}: chunk schedule product {routed} exceeds vocab_size {vocab}; use fewer or smaller chunks"
        )
    routing = data.get("routing", "contiguous")
    if routing not in ("contiguous", "interleaved"):
        raise ProfileError(f"{where}: routing must be 'contiguous' or 'interleaved', got {routing!r}")
    tokenizer = data.get("tokenizer", "smollm2")
    if not isinstance(tokenizer, str) or not tokenizer:
        raise ProfileError(f"{where}: 'tokenizer' must be a non-empty string")
    revision = data.get("revision")
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise ProfileError(f"{where}: 'revision' must be a non-empty string (a hub branch, tag or commit)")
    fingerprint = data.get("tokenizer_fingerprint")
    if fingerprint is not None and (not isinstance(fingerprint, str) or not _SHA256_RE.match(fingerprint)):
        raise ProfileError(f"{where}: 'tokenizer_fingerprint' must be 64 lowercase hex digits (a SHA-256)")
    return Profile(name=name, vocab_size=vocab, segments=segments, levels=levels, context_width=h,
                   tokenizer=tokenizer, spec_version=spec_version, routing=routing, tokenizer_revision=revision,
                   tokenizer_fingerprint=fingerprint, multiplex=multiplex)


def _multiplex(data: dict[str, Any], where: str, spec_version: int, depth: int) -> Multiplex | None:
    """Spec v5's `multiplex` mapping (required there, refused elsewhere)."""
    raw = data.get("multiplex")
    if spec_version < 5:
        if raw is not None:
            raise ProfileError(f"{where}: 'multiplex' (position-multiplexed levels) needs spec_version 5")
        return None
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: spec v5 needs 'multiplex: {{front_tokens, front_public, public}}'")
    unknown = set(raw) - {"front_tokens", "front_public", "public"}
    if unknown:
        raise ProfileError(f"{where}: multiplex: unknown key {sorted(unknown)[0]!r}")
    mw = f"{where} multiplex"
    front = _int(raw, "front_tokens", mw, 0)
    public = _int(raw, "public", mw)
    front_public = _int(raw, "front_public", mw, public)
    if not 0 <= front <= 4096:
        raise ProfileError(f"{mw}: front_tokens must be in 0..4096")
    top = MULTIPLEX_LANES if depth == 1 else MULTIPLEX_LANES - 1
    if not 1 <= public <= top or not public <= front_public <= MULTIPLEX_LANES:
        raise ProfileError(f"{mw}: public must be a percent in 1..{top} (deeper levels need lanes) and "
                           "front_public in public..100")
    return Multiplex(front, front_public, public)


RELATIVE_PREFIXES = ("./", "../")  # a tokenizer written so is a directory relative to the profile's folder


def load_profile(path: str | Path) -> Profile:
    """The profile in a YAML file. A `tokenizer:` starting with `./` or `../` is a directory relative to the file's
    folder (so a deployment's profiles folder and its tokenizers move together): resolved here, written back as
    written (`Profile.to_dict`)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from None
    profile = profile_from_dict(data)
    if profile.tokenizer.startswith(RELATIVE_PREFIXES):
        from dataclasses import replace

        resolved = (Path(path).resolve().parent / profile.tokenizer).resolve()
        profile = replace(profile, tokenizer=str(resolved), tokenizer_written=profile.tokenizer)
    return profile


PROFILES_DIR = project_root() / "policies" / "profiles"
_FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a profile name, never a path


def deployment_profiles_dir() -> Path:
    """Where a deployment keeps its own profiles, outside the package (read at each call): $HERO_PROFILES_DIR,
    else $HERO_HOME/profiles, so a profile `hero keys init --models` or `hero profile new` wrote is found by every
    later command of the same deployment without a setting."""
    from verifier.base.resources import hero_home

    explicit = os.environ.get(PROFILES_DIR_ENV)
    return Path(explicit).expanduser() if explicit else hero_home() / "profiles"


def profile_path(name_or_path: str) -> Path:
    """The YAML file a profile name means: NAME.yaml in the deployment's profiles folder (`deployment_profiles_dir`),
    else policies/profiles/NAME.yaml, else the argument as a path."""
    for folder in (deployment_profiles_dir(), PROFILES_DIR):
        if folder is not None and _FILE_NAME_RE.match(name_or_path):
            path = folder / f"{name_or_path}.yaml"
            if path.exists():
                return path
    return Path(name_or_path)


def resolve_profile(name_or_path: str) -> Profile:
    """A profile by name (a file under $HERO_PROFILES_DIR, then policies/profiles) or by path to a YAML file."""
    return load_profile(profile_path(name_or_path))


def default_profile() -> Profile:
    """The shipped default (policies/profiles/default.yaml): spec v2 HeRo^2(2,2), 24 bits, for SmolLM2."""
    return load_profile(PROFILES_DIR / "default.yaml")


def v3_profile() -> Profile:
    """The spec v3 profile (policies/profiles/v3.yaml): public `model` by maximum likelihood, v3 construction."""
    return load_profile(PROFILES_DIR / "v3.yaml")


def v4_profile() -> Profile:
    """The spec v4 profile (policies/profiles/v4.yaml): v3's construction, the public level searched over the
    issued model ids only (docs/spec.md section 18)."""
    return load_profile(PROFILES_DIR / "v4.yaml")


def v5_profile() -> Profile:
    """The spec v5 profile (policies/profiles/v5.yaml): position-multiplexed levels (docs/spec.md section 19), what
    a new deployment gets."""
    return load_profile(PROFILES_DIR / "v5.yaml")


def v1_profile() -> Profile:
    """The spec v1 default (policies/profiles/v1.yaml): what texts made before spec v2 decode with."""
    return load_profile(PROFILES_DIR / "v1.yaml")


def make_profile(
    bits: tuple[int, ...],
    total_bits: int,
    vocab_size: int,
    schedule: tuple[int, ...] | None = None,
    context_width: int = 4,
    name: str | None = None,
    routing: str = "contiguous",
    spec_version: int = 1,
) -> Profile:
    """Programmatic profile HeRo^L(bits) carrying `total_bits` (one field per level)."""
    per_seg = sum(bits)
    if total_bits % per_seg:
        raise ProfileError(f"total_bits {total_bits} is not a multiple of sum(bits) = {per_seg}")
    segments = total_bits // per_seg
    levels: list[dict[str, Any]] = []
    for i, b in enumerate(bits, start=1):
        lv: dict[str, Any] = {"bits": b, "fields": [{"name": f"level{i}", "bits": b * segments}]}
        if i < len(bits):
            lv["chunks"] = (schedule[i - 1] if schedule else None) or (
                DEFAULT_FIRST_CHUNKS if i == 1 else DEFAULT_DEEPER_CHUNKS
            )
        levels.append(lv)
    label = name or f"hero{len(bits)}-{'-'.join(map(str, bits))}-{total_bits}"
    return profile_from_dict(
        {
            "name": label,
            "vocab_size": vocab_size,
            "context_width": context_width,
            "segments": segments,
            "levels": levels,
            "routing": routing,
            "spec_version": spec_version,
        }
    )
