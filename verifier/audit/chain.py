"""The hash chain's definition: which fields an event hashes, and how (shared by appends, checks and the
transparency log, whose leaf data is the same canonical JSON). Events appended now are RFC 8785 (JCS), marked
`canon` = "jcs" in their hashed fields; events without the marker (all written before) keep Python json's form
(see `transparency.CANON_KEY` for why the marker cannot be stripped)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _jcs_str
from json.encoder import encode_basestring_ascii as _json_str
from operator import attrgetter

from verifier.audit.models import AuditEventRow
from verifier.audit.transparency import CANON_JCS, CANON_KEY, canonical, encode_event, jcs

GENESIS = "0" * 64
APPEND_CANON = CANON_JCS  # the canonicalisation `service.append` writes every new event in
HASHED_FIELDS = (
    "idx",
    "created_at",
    "action",
    "subject",
    "role",
    "jti",
    "levels",
    "key_version",
    "text_sha256",
    "outcome",
    "detail",
)


@dataclass(slots=True)
class AppendedEvent:
    """An event row as the append path builds it: the columns of AuditEventRow, without the ORM's instance
    bookkeeping (rows are inserted with one Core executemany and never attached to a session; building and
    reading instrumented ORM objects cost ~40 % of a group commit's CPU)."""

    idx: int
    created_at: str
    action: str
    subject: str
    role: str
    jti: str
    levels: str
    key_version: str | None
    text_sha256: str | None
    outcome: str
    detail: str | None
    prev_hash: str
    hash: str
    issuer: str | None = None  # hashed only when set (see row_fields)
    canon: str | None = None  # the event's canonicalisation (transparency.CANON_KEY); hashed only when set
    leaf_data: bytes | None = field(default=None, repr=False)  # canonical(row_fields): hashed twice, built once


_hashed_values = attrgetter(*HASHED_FIELDS)  # one C call for the row's hashed values, in HASHED_FIELDS order


def row_fields(row: AuditEventRow | AppendedEvent) -> dict[str, object]:
    """The hashed fields: HASHED_FIELDS, `issuer` when the event has one, and `canon` when the event names its
    canonicalisation (events without them, all those written before they existed among them, hash exactly as they
    always did)."""
    fields = dict(zip(HASHED_FIELDS, _hashed_values(row), strict=True))
    issuer = getattr(row, "issuer", None)
    if issuer is not None:
        fields["issuer"] = issuer
    canon = getattr(row, "canon", None)
    if canon is not None:
        fields[CANON_KEY] = canon
    return fields


# canonical_row writes the keys in this (sorted) order; the assert keeps it tied to HASHED_FIELDS.
assert tuple(sorted(HASHED_FIELDS)) == ("action", "created_at", "detail", "idx", "jti", "key_version", "levels",
                                        "outcome", "role", "subject", "text_sha256")


def canonical_row(row: AuditEventRow | AppendedEvent) -> bytes:
    """`encode_event(row_fields(row))`: the bytes the row's chain hash and leaf cover, in the canonicalisation its
    `canon` names (`_jcs_row` for "jcs"; an unknown marker raises, as `encode_event` does).

    Python json's form (no marker) is written directly: the keys and their order are fixed, so only the values need
    encoding, each with the string escaper json's own encoder uses (ensure_ascii). About 4x cheaper per event
    than a dict plus the encoder. A value of any other type than the columns' (str, None where nullable, an int
    idx) goes through `canonical` itself, so the bytes are the same for every row
    (tests/audit/test_audit_fastpaths.py)."""
    canon = getattr(row, "canon", None)
    if canon is not None:
        return _jcs_row(row) if canon == CANON_JCS else encode_event(row_fields(row))
    idx, created_at, action, subject, role, jti, levels, key_version, text_sha256, outcome, detail = _hashed_values(row)
    issuer = getattr(row, "issuer", None)
    if type(idx) is int:  # bool or int subclasses: json and str() may spell them differently
        try:
            iss = "" if issuer is None else f'"issuer":{_json_str(issuer)},'  # sorted between idx and jti
            return (
                f'{{"action":{_json_str(action)},"created_at":{_json_str(created_at)},'
                f'"detail":{"null" if detail is None else _json_str(detail)},"idx":{idx},{iss}"jti":{_json_str(jti)},'
                f'"key_version":{"null" if key_version is None else _json_str(key_version)},'
                f'"levels":{_json_str(levels)},"outcome":{_json_str(outcome)},"role":{_json_str(role)},'
                f'"subject":{_json_str(subject)},'
                f'"text_sha256":{"null" if text_sha256 is None else _json_str(text_sha256)}}}'
            ).encode()
        except TypeError:  # a value that is not a str (None in a non-null column, a number, ...)
            pass
    return canonical(row_fields(row))


_JCS_SAFE_INT = 2**53  # RFC 8785 writes integers as ECMAScript numbers: exact (and str()) only below 2^53


def _jcs_row(row: AuditEventRow | AppendedEvent) -> bytes:
    """`jcs(row_fields(row))` of a row marked "jcs", written directly like the legacy form above. JCS's keys here are
    ASCII, so its UTF-16 order is the sorted order (`canon` between `action` and `created_at`); its strings are
    json's `encode_basestring` (only `"`, `\\` and controls escaped, `\\b \\f \\n \\r \\t` short, others `\\u00xx`)
    encoded UTF-8. Any other value type, an idx outside JCS's exact integers, or a lone surrogate (which RFC 8785
    refuses) goes through `jcs` itself, so the bytes, or the error, are the same for every row
    (tests/audit/test_jcs_events.py)."""
    idx, created_at, action, subject, role, jti, levels, key_version, text_sha256, outcome, detail = _hashed_values(row)
    issuer = getattr(row, "issuer", None)
    if type(idx) is int and -_JCS_SAFE_INT < idx < _JCS_SAFE_INT:
        try:
            iss = "" if issuer is None else f'"issuer":{_jcs_str(issuer)},'  # sorted between idx and jti
            return (
                f'{{"action":{_jcs_str(action)},"canon":"{CANON_JCS}","created_at":{_jcs_str(created_at)},'
                f'"detail":{"null" if detail is None else _jcs_str(detail)},"idx":{idx},{iss}"jti":{_jcs_str(jti)},'
                f'"key_version":{"null" if key_version is None else _jcs_str(key_version)},'
                f'"levels":{_jcs_str(levels)},"outcome":{_jcs_str(outcome)},"role":{_jcs_str(role)},'
                f'"subject":{_jcs_str(subject)},'
                f'"text_sha256":{"null" if text_sha256 is None else _jcs_str(text_sha256)}}}'
            ).encode()
        except (TypeError, UnicodeEncodeError):  # not a str, or a lone surrogate: jcs() decides (or raises)
            pass
    return jcs(row_fields(row))


def compute_hash(prev_hash: str, fields: dict[str, object]) -> str:
    """The chain hash of an event given its hashed fields (`row_fields`), in the canonicalisation they name."""
    return hash_canonical(prev_hash, encode_event(fields))


def hash_canonical(prev_hash: str, data: bytes) -> str:
    """`compute_hash` given the canonical JSON of the fields already (the append path also hashes it as a leaf)."""
    return hashlib.sha256(prev_hash.encode() + b"\n" + data).hexdigest()
