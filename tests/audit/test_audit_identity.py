"""What the append path stores and hands out is exactly what the plain definitions give, on both backends:
each event's fields and chain hash (`compute_hash` over `canonical`), every Merkle node (a `MemoryTree` over
`event_leaf` of the stored fields, in its append order), the checkpoint and every receipt (`make_receipt` with
`MemoryTree.inclusion_proof`). Batches of many sizes straddle subtree boundaries, start on an empty log, follow
a rolled-back append and appends "by another process" (the node memory emptied)."""

from __future__ import annotations

import json
import random

import pytest
from sqlalchemy import text

from verifier.audit import merkle
from verifier.audit.chain import GENESIS, compute_hash, row_fields
from verifier.audit.models import AuditEventRow
from verifier.audit.service import AuditEvent, AuditUnavailable, record_with_receipts
from verifier.audit.signer import signer_from_settings
from verifier.audit.transparency import MemoryTree, event_leaf, make_receipt
from verifier.base.db import Database, upgrade
from verifier.base.settings import Settings

# No NUL: PostgreSQL text cannot hold it (the append fails closed there, as before).
ODD = ['"', "\\", "\n", "\r", "\t", "\x1f", "\x7f", "/", "é", "€", "\u2028", "😀", " ", "a", "Z", "0", ","]
SIZES = [1, 1, 2, 3, 1, 8, 16, 5, 31, 64, 1, 2, 128, 7, 129, 100, 1, 33]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ODD) for _ in range(rng.randrange(n + 1)))


def _event(rng: random.Random) -> AuditEvent:
    return AuditEvent(
        action=rng.choice(["verify", "jobs.read", _text(rng, 40)]),
        subject=rng.choice(["alice@example.org", _text(rng, 300)]),  # over 256: cut
        role=rng.choice(["moderator", _text(rng, 70)]),
        jti=_text(rng, 20),
        levels=rng.choice([[], [1], [1, 2, 3], (2, True)]),
        key_version=rng.choice([None, "l1-v1", _text(rng, 20)]),
        text_sha256=rng.choice([None, f"{rng.getrandbits(256):064x}"]),
        outcome=rng.choice(["watermarked", "ok", _text(rng, 70)]),
        detail=rng.choice([None, "", _text(rng, 80)]),
    )


def _expected_fields(ev: AuditEvent) -> tuple:
    """The columns as the append path has always derived them from an event."""
    return (ev.action[:32], ev.subject[:256], ev.role[:64], ev.jti[:256], ",".join(str(int(x)) for x in ev.levels),
            ev.key_version, ev.text_sha256, ev.outcome[:64], ev.detail)


def _stored(db: Database, after: int) -> list[tuple[dict, str, str]]:
    """(hashed fields, prev_hash, hash) of the events after `after`, as read back from the database."""
    with db.snapshot() as s:
        rows = s.query(AuditEventRow).where(AuditEventRow.idx > after).order_by(AuditEventRow.idx)
        return [(row_fields(r), r.prev_hash, r.hash) for r in rows]


def _nodes(db: Database) -> list[tuple[int, int, bytes]]:
    order = "rowid" if db.dialect == "sqlite" else "level, idx"  # SQLite: the insertion order too
    with db.snapshot() as s:
        rows = s.execute(text(f"SELECT level, idx, hash FROM hero_audit_tree ORDER BY {order}")).all()
    return [(int(lv), int(i), bytes(h)) for lv, i, h in rows]


@pytest.mark.parametrize("interval_s", [0.0, 3600.0])
def test_appends_store_and_prove_exactly_what_the_definitions_give(db_url, hero_home, monkeypatch, interval_s):
    upgrade(db_url)
    signer = signer_from_settings(Settings(home=hero_home, database_url=db_url), create=True)
    db = Database(db_url)
    rng = random.Random(f"{db_url[:6]}-{interval_s}")
    tree, nodes, prev = MemoryTree(), [], GENESIS
    try:
        for b, size in enumerate(SIZES):
            if b == 5:  # a failed append: rolled back, leaving nothing in the log or the node memory
                monkeypatch.setattr(merkle, "checkpoint", _boom)
                with pytest.raises(AuditUnavailable):
                    record_with_receipts(db, [_event(rng) for _ in range(9)], signer, interval_s)
                monkeypatch.undo()
            if b % 4 == 3:
                merkle._SHARED.clear()  # as if the earlier appends had been made by another process
            events = [_event(rng) for _ in range(size)]
            receipts = record_with_receipts(db, events, signer, interval_s)
            rows = _stored(db, tree.size)
            assert [f["idx"] for f, _, _ in rows] == list(range(tree.size + 1, tree.size + size + 1))
            for ev, (fields, prev_hash, hash_) in zip(events, rows, strict=True):
                assert tuple(fields[k] for k in ("action", "subject", "role", "jti", "levels", "key_version",
                                                 "text_sha256", "outcome", "detail")) == _expected_fields(ev)
                assert prev_hash == prev and hash_ == compute_hash(prev, fields)
                prev = hash_
                nodes += tree.append(event_leaf(fields))
            n = tree.size
            note = signer.sign(n, tree.root())  # Ed25519 signatures are deterministic
            expected = [make_receipt(f, f["idx"] - 1, tree.inclusion_proof(f["idx"] - 1, n), note) for f, _, _ in rows]
            assert json.dumps(receipts) == json.dumps(expected)  # key order included
            stored = _nodes(db)
            assert stored == (nodes if db.dialect == "sqlite" else sorted(nodes))
    finally:
        db.dispose()


def _boom(*_a, **_k):
    raise RuntimeError("checkpoint failed")
