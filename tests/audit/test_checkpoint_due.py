"""An append's receipts read the newest stored checkpoint only when one may be due: while a checkpoint this
process has seen committed is younger than HERO_CHECKPOINT_INTERVAL_SECONDS, none is (a round trip saved per
group commit); the memory is filled only by commits, so a rolled-back store is not remembered."""

from __future__ import annotations

import pytest
from sqlalchemy import event, select

from verifier.audit import merkle
from verifier.audit.models import CheckpointRow
from verifier.audit.service import AuditEvent, AuditUnavailable, record_with_receipts, text_digest, verify_chain
from verifier.audit.signer import signer_from_settings
from verifier.audit.transparency import verify_receipt
from verifier.base.db import Database, upgrade
from verifier.base.settings import Settings

INTERVAL = 300.0


def _events(tag: str, n: int = 3) -> tuple[list[str], list[AuditEvent]]:
    texts = [f"{tag}-{i}" for i in range(n)]
    return texts, [AuditEvent(action="verify", subject="s", role="moderator", jti="j", levels=[1],
                              text_sha256=text_digest(t), outcome="not-watermarked") for t in texts]


@pytest.fixture
def log(db_url, hero_home, monkeypatch):
    upgrade(db_url)
    db = Database(db_url)
    signer = signer_from_settings(Settings(home=hero_home, database_url=db_url), create=True)
    clock = [1_000_000.0]
    monkeypatch.setattr(merkle.time, "time", lambda: clock[0])
    reads: list[str] = []

    def count(conn, cursor, statement, *args):
        if "FROM hero_audit_checkpoints ORDER BY size DESC" in statement:  # the newest stored checkpoint
            reads.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)

    def append(tag: str) -> None:
        texts, events = _events(tag)
        for t, r in zip(texts, record_with_receipts(db, events, signer, INTERVAL), strict=True):
            verify_receipt(r, signer.vkey, text=t)

    def stored() -> list[int]:
        with db.snapshot() as s:
            return list(s.scalars(select(CheckpointRow.size).order_by(CheckpointRow.size)))

    yield db, signer, clock, reads, append, stored
    event.remove(db.engine, "before_cursor_execute", count)
    db.dispose()


def test_no_checkpoint_read_while_none_is_due_and_one_stored_once_due(log):
    db, signer, clock, reads, append, stored = log
    append("a")
    assert stored() == [3] and len(reads) == 1  # the first: nothing known, read, stored
    reads.clear()
    for k in range(5):
        clock[0] += 10
        append(f"b{k}")
    assert reads == [] and stored() == [3]  # not due: neither read nor stored
    clock[0] += INTERVAL
    append("c")
    assert len(reads) == 1 and stored() == [3, 21]  # due again: read, and stored at the new size
    assert verify_chain(db, signer.vkey).valid


def test_a_checkpoint_stored_by_a_rolled_back_append_is_not_remembered(log, monkeypatch):
    db, signer, clock, reads, append, stored = log
    real_store = merkle.store

    def store_then_fail(*args, **kwargs):
        real_store(*args, **kwargs)
        raise RuntimeError("disk full")

    monkeypatch.setattr(merkle, "store", store_then_fail)
    _, events = _events("x")
    with pytest.raises(AuditUnavailable):
        record_with_receipts(db, events, signer, INTERVAL)
    assert stored() == []
    monkeypatch.setattr(merkle, "store", real_store)
    reads.clear()
    clock[0] += 10
    append("y")  # the rolled-back checkpoint left no memory: read, and stored now
    assert len(reads) == 1 and stored() == [3]
