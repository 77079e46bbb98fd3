"""The append path's fast versions of the audit log's encodings and proofs give the very bytes of the plain ones:
`canonical_row` = `canonical(row_fields(row))` (= json.dumps sorted, compact, ASCII), `new_subtrees` = leaf by
leaf `MemoryTree.append`, `TreeView.inclusion_proofs` = `inclusion_proof` per leaf (= RFC 9162 PATH)."""

from __future__ import annotations

import enum
import json
import random

import pytest

from verifier.audit import transparency as tl
from verifier.audit.chain import HASHED_FIELDS, AppendedEvent, canonical_row, row_fields
from verifier.audit.models import AuditEventRow

# Characters JSON escapes (quote, backslash, controls), ones ensure_ascii escapes (non-ASCII, astral: surrogate
# pairs, lone surrogates) and ones it leaves alone (/, <, &, DEL).
ODD = ['"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "/", "<", "&", "é", "€", "\u2028",
       "\ufeff", "\ud800", "\udfff", "😀", "𝄞", " ", "a", "Z", "0", ","]


def _text(rng: random.Random, n: int = 12) -> str:
    return "".join(rng.choice(ODD) for _ in range(rng.randrange(n + 1)))


def _reference(fields: dict) -> bytes:
    """The definition, spelled out with json.dumps."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _row(rng: random.Random, cls=AppendedEvent, odd_types: bool = False):
    values = {
        "idx": rng.choice([1, 2, 7, 2**31 - 1, 2**70, rng.randrange(1, 10**6)]),
        "created_at": rng.choice(["2026-11-27T07:30:02.123456+00:00", _text(rng)]),
        "action": rng.choice(["verify", "keys.init", _text(rng, 32)]),
        "subject": _text(rng, 40),
        "role": rng.choice(["moderator", "auditor", _text(rng)]),
        "jti": rng.choice(["", _text(rng)]),
        "levels": rng.choice(["", "1", "1,2,3", _text(rng)]),
        "key_version": rng.choice([None, "l1-v1", _text(rng)]),
        "text_sha256": rng.choice([None, "ab" * 32, _text(rng)]),
        "outcome": rng.choice(["watermarked", "ok", _text(rng)]),
        "detail": rng.choice([None, "", _text(rng, 60)]),
    }
    if odd_types:  # what no append writes, but canonical() would still encode: the fallback must match it
        field = rng.choice(HASHED_FIELDS)
        values[field] = rng.choice([None, 0, -3, 1.5, True, False, [1, "x"], {"b": 1, "a": None}, 2**64,
                                    _Level.ONE, _Str("s\n")])
    if cls is AppendedEvent:
        return AppendedEvent(**values, prev_hash="0" * 64, hash="")
    return cls(**values)


class _Level(enum.IntEnum):
    ONE = 1


class _Str(str):
    pass


@pytest.mark.parametrize("odd_types", [False, True])
def test_canonical_row_is_the_canonical_json_of_the_row(odd_types):
    rng = random.Random(20261127 + odd_types)
    for i in range(5000):
        row = _row(rng, AuditEventRow if i % 10 == 0 else AppendedEvent, odd_types)
        expected = _reference(row_fields(row))
        assert canonical_row(row) == expected == tl.canonical(row_fields(row)), row_fields(row)


def test_canonical_row_of_a_bool_or_int_subclass_index_is_what_json_writes():
    row = _row(random.Random(1))
    for idx in (True, False, _Level.ONE):
        row.idx = idx
        assert canonical_row(row) == _reference(row_fields(row))


def test_canonical_row_refuses_what_json_refuses():
    row = _row(random.Random(2))
    row.detail = object()
    with pytest.raises(TypeError):
        canonical_row(row)


def test_row_fields_lists_the_hashed_fields_in_order():
    row = _row(random.Random(3))
    assert list(row_fields(row).items()) == [(k, getattr(row, k)) for k in HASHED_FIELDS]


def _leaves(n: int) -> list[bytes]:
    return [tl.leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def test_new_subtrees_are_the_nodes_appending_leaf_by_leaf_makes_in_that_order():
    leaves = _leaves(300)
    for first in [*range(0, 70), 127, 128, 129, 191, 255, 256, 257]:
        for count in (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 43):
            tree = tl.MemoryTree(leaves[:first])
            left = {lv: tree.levels[lv][i] for lv, i in tl.frontier_nodes(first)}
            expected = [node for h in leaves[first:first + count] for node in tree.append(h)]
            assert tl.new_subtrees(left, first, leaves[first:first + count]) == expected, (first, count)


def test_new_subtrees_without_a_frontier_node_it_needs_fails():
    tree = tl.MemoryTree(_leaves(5))
    left = {lv: tree.levels[lv][i] for lv, i in tl.frontier_nodes(5)}
    del left[0]
    with pytest.raises(KeyError):
        tl.new_subtrees(left, 5, _leaves(2))


def _reference_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n]), straight from the definition."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*_reference_path(m, leaves[:k]), tl.root_of(leaves[k:])[1]]
    return [*_reference_path(m - k, leaves[k:]), tl.root_of(leaves[:k])[1]]


def test_batch_inclusion_proofs_are_the_proofs_of_each_leaf():
    leaves = _leaves(40)
    tree = tl.MemoryTree(leaves)
    for size in range(1, 41):
        for first in range(size):
            for end in range(first + 1, size + 1):
                proofs = tl.TreeView(tree._get).inclusion_proofs(first, end, size)
                assert proofs == [tree.inclusion_proof(m, size) for m in range(first, end)], (first, end, size)
                assert len({id(p) for p in proofs}) == len(proofs)  # each receipt gets its own list
        assert tree.inclusion_proofs(0, size, size) == [_reference_path(m, leaves[:size]) for m in range(size)]


def test_batch_inclusion_proofs_of_large_trees_and_encoded_nodes():
    rng = random.Random(5)
    leaves = _leaves(5000)
    tree = tl.MemoryTree(leaves)
    for _ in range(300):
        size = rng.choice([rng.randrange(1, 5001), 4096, 4097, 2048 + 129, 5000])
        end = rng.randrange(1, size + 1) if rng.random() < 0.5 else size  # an append's leaves end the tree
        first = max(0, end - rng.choice([1, 2, 16, 33, 128, 129, 700]))
        view = tl.TreeView(tree._get)  # a fresh view each time: no right-edge hash carried over
        got = view.inclusion_proofs(first, end, size, tl.b64)
        assert got == [[tl.b64(p) for p in tree.inclusion_proof(m, size)] for m in range(first, end)]


@pytest.mark.parametrize(("first", "end", "size"), [(0, 0, 3), (2, 1, 3), (-1, 1, 3), (0, 4, 3), (0, 1, 0)])
def test_batch_inclusion_proofs_refuse_leaves_outside_the_tree(first, end, size):
    with pytest.raises(tl.TransparencyError):
        tl.MemoryTree(_leaves(3)).inclusion_proofs(first, end, size)


def test_receipt_of_is_make_receipt():
    leaves = _leaves(9)
    tree = tl.MemoryTree(leaves)
    event = {"idx": 4, "action": "verify"}
    proof = tree.inclusion_proof(3, 9)
    made = tl.make_receipt(event, 3, proof, "note\n")
    assert json.dumps(tl.receipt_of(event, 3, [tl.b64(p) for p in proof], "note\n")) == json.dumps(made)
