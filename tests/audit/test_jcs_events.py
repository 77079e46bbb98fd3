"""Audit events appended now are RFC 8785 (JCS) for both their chain hash and their transparency-log leaf, and say
so in a hashed field (`canon` = "jcs"); receipts of them are version 2. Version-1 receipts (the stored vector,
written by the code before) still verify, and neither the marker nor the receipt version can be altered without
the receipt failing."""

from __future__ import annotations

import hashlib
import random

import pytest
import rfc8785

from tests.audit.helpers import NEW_TEXT, V1, mixed_log
from verifier.audit import repository as repo
from verifier.audit import transparency as tl
from verifier.audit.chain import HASHED_FIELDS, AppendedEvent, canonical_row, row_fields
from verifier.audit.transparency import TransparencyError, verify_receipt


def test_a_new_event_is_hashed_and_leafed_as_rfc8785_of_its_fields(db_url):
    db, receipts = mixed_log(db_url)
    try:
        with db.snapshot() as s:  # the hashed fields, chain links and column as stored, and the stored leaves
            rows = [(row_fields(r), r.prev_hash, r.hash, r.canon) for r in repo.iterate(s) if r.idx > 3]
            leaves = [repo.tree_node(s, 0, i) for i in range(3, 6)]
    finally:
        db.dispose()
    assert [f["idx"] for f, *_ in rows] == [4, 5, 6]
    for (fields, prev_hash, hash_, canon), leaf, receipt in zip(rows, leaves, receipts, strict=True):
        data = rfc8785.dumps(fields)
        assert fields["canon"] == canon == "jcs"
        assert leaf == tl.leaf_hash(data)  # the stored Merkle leaf
        assert hash_ == hashlib.sha256(prev_hash.encode() + b"\n" + data).hexdigest()  # the chain hash
        assert receipt["version"] == 2 and receipt["event"]["canon"] == "jcs"
        assert tl.event_leaf(receipt["event"]) == tl.leaf_hash(data)
    first = rows[0][0]
    jcs, legacy = rfc8785.dumps(first), tl.canonical(first)
    assert jcs != legacy  # the event exercises where the forms differ
    assert "Zoë Ünal".encode() in jcs and b"\x7f" in jcs and b"\\u00eb" in legacy and b"\\u007f" in legacy
    assert verify_receipt(receipts[0], V1["vkey"], origin=V1["origin"], text=NEW_TEXT).size == 6


def test_version_1_receipts_of_the_stored_vector_still_verify():
    """tests/vectors/audit_receipt_v1.json was written by the code before JCS events (its `generated_at_commit`)."""
    assert len(V1["receipts"]) == 3
    for receipt, leaf_data in zip(V1["receipts"], V1["leaf_data"], strict=True):
        assert "version" not in receipt and "canon" not in receipt["event"]
        assert verify_receipt(receipt, V1["vkey"], origin=V1["origin"]).size == 3
        assert verify_receipt({"version": 1, **receipt}, V1["vkey"]).size == 3  # the version written out
        assert tl.event_leaf(receipt["event"]) == tl.leaf_hash(leaf_data.encode())
    verify_receipt(V1["receipts"][1], V1["vkey"], text=V1["text"])
    event = {**V1["receipts"][1]["event"], "levels": "1,2"}
    assert tl.canonical(event) == V1["leaf_data"][1].encode() != tl.jcs(event)  # non-ASCII: the forms differ


def _fails(receipt: dict, vkey: str, match: str) -> None:
    with pytest.raises(TransparencyError, match=match):
        verify_receipt(receipt, vkey)


def test_the_canonicalisation_marker_and_the_receipt_version_cannot_be_altered(sqlite_url):
    db, receipts = mixed_log(sqlite_url)
    db.dispose()
    vkey = V1["vkey"]
    new, old = receipts[0], V1["receipts"][1]
    assert verify_receipt(new, vkey).size == 6
    stripped = {k: v for k, v in new["event"].items() if k != "canon"}
    # downgrade: the marker removed (or replaced), the receipt still claiming version 2 ...
    _fails({**new, "event": stripped}, vkey, "version 2 proves events with canon='jcs'")
    _fails({**new, "event": {**new["event"], "canon": "json"}}, vkey, "version 2 proves")
    # ... or claiming version 1 too: the event is then read in Python json's form, which is not what was hashed
    v1_form = {k: v for k, v in new.items() if k != "version"}
    _fails({**v1_form, "event": stripped}, vkey, "does not lead to the checkpoint's root")
    _fails({**new, "version": 1, "event": stripped}, vkey, "does not lead to the checkpoint's root")
    _fails({**v1_form, "event": {**new["event"], "canon": None}}, vkey, "version 1 proves|unknown canonicalisation")
    # upgrade: an old event marked as JCS, the receipt as version 2
    _fails({**old, "version": 2, "event": {**old["event"], "canon": "jcs"}}, vkey, "does not lead to")
    _fails({**old, "event": {**old["event"], "canon": "jcs"}}, vkey, "version 1 proves events without 'canon'")
    _fails({**old, "version": 2}, vkey, "version 2 proves")
    # versions this verifier does not know are refused, never guessed
    for version in (3, 0, "2", True, None):
        _fails({**new, "version": version}, vkey, "unknown receipt version")
    with pytest.raises(TransparencyError, match="unknown canonicalisation"):
        tl.event_leaf({**new["event"], "canon": "json"})


# Characters where the two forms differ or that need escaping; lone surrogates only in some rows (RFC 8785 refuses
# them, and so must the fast path).
ODD = ['"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "/", "<", "&", "é", "€", "\u2028",
       "\ufeff", "😀", "𝄞", " ", "a", "Z", "0", ","]
SURROGATES = ["\ud800", "\udfff"]


def _text(rng: random.Random, n: int = 12, lone: bool = False) -> str:
    alphabet = ODD + SURROGATES if lone else ODD
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(n + 1)))


def _jcs_row(rng: random.Random, odd_types: bool) -> AppendedEvent:
    lone = rng.random() < 0.1
    values: dict[str, object] = {
        "idx": rng.choice([1, 7, 2**31 - 1, 2**53 - 1, 2**53, -(2**53) + 1, 2**70, rng.randrange(1, 10**6)]),
        "created_at": rng.choice(["2026-12-06T07:30:02.123456+00:00", _text(rng)]),
        "action": rng.choice(["verify", "keys.init", _text(rng, 32)]),
        "subject": _text(rng, 40, lone),
        "role": rng.choice(["moderator", "auditor", _text(rng)]),
        "jti": rng.choice(["", _text(rng)]),
        "levels": rng.choice(["", "1", "1,2,3", _text(rng)]),
        "key_version": rng.choice([None, "l1-v1", _text(rng)]),
        "text_sha256": rng.choice([None, "ab" * 32, _text(rng)]),
        "outcome": rng.choice(["watermarked", "ok", _text(rng)]),
        "detail": rng.choice([None, "", _text(rng, 60, lone)]),
    }
    if odd_types:  # what no append writes, but jcs() would still encode (or refuse): the fallback must agree
        values[rng.choice(HASHED_FIELDS)] = rng.choice([None, 0, -3, 1.5, 1e21, 0.1 + 0.2, True, [1, "x"],
                                                        {"b": 1, "a": None}, 2**64])
    issuer = rng.choice([None, "https://idp.example/", _text(rng, 20, lone)])
    return AppendedEvent(**values, prev_hash="0" * 64, hash="", issuer=issuer, canon="jcs")  # type: ignore[arg-type]


def _outcome(f, arg: object) -> bytes | type:
    try:
        return f(arg)
    except Exception as exc:  # the error's type is part of what must agree
        return type(exc)


@pytest.mark.parametrize("odd_types", [False, True])
def test_the_append_paths_jcs_encoding_is_rfc8785_of_the_row(odd_types):
    """`canonical_row` writes a JCS row directly (as it does the older form); byte for byte `rfc8785.dumps` of its
    fields, or the same error (lone surrogates, integers beyond 2^53)."""
    rng = random.Random(20261206 + odd_types)
    encoded = 0
    for _ in range(5000):
        row = _jcs_row(rng, odd_types)
        got, want = _outcome(canonical_row, row), _outcome(rfc8785.dumps, row_fields(row))
        assert got == want, row_fields(row)
        encoded += isinstance(got, bytes)
    assert encoded > 3000  # most rows encode: the comparison is mostly of bytes, not of errors
