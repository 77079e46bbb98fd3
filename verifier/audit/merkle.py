"""The audit log as a transparency log: Merkle nodes kept next to the events, checkpoints, receipts.

Appends (inside the chain lock) add each event's leaf and the perfect subtrees it completes, so any
root, inclusion or consistency proof needs O(log^2 n) node reads. Checkpoints are signed on demand
(receipts, `hero audit checkpoint`, GET /v1/audit/checkpoint) and one is stored whenever the newest
stored one is older than HERO_CHECKPOINT_INTERVAL_SECONDS. Callers own the transaction.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence

from sqlalchemy import event
from sqlalchemy.orm import Session

from verifier.audit import repository as repo
from verifier.audit.chain import AppendedEvent, canonical_row, row_fields
from verifier.audit.models import AuditEventRow, CheckpointRow
from verifier.audit.signer import LogSigner
from verifier.audit.transparency import (
    TreeView,
    b64,
    frontier_nodes,
    leaf_hash,
    new_subtrees,
    receipt_of,
)


class LogCorrupt(RuntimeError):
    """A Merkle node the log needs is missing: the tree tables were edited."""


# Merkle nodes of complete subtrees never change once committed, so the append path (extend, receipts)
# keeps the ones it has seen in a per-engine memory, filled only when the transaction that read or wrote
# them commits (a rolled-back append leaves nothing behind). Without it a receipt costs ~20 indexed reads.
# Verification and proofs served to third parties (`view`, `consistency`, `current_checkpoint`) always
# read the database.
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHARED_MAX = 1 << 16
_PENDING = "hero_tree_nodes"


# Likewise the creation time of the newest stored checkpoint this process has seen committed (stored here or
# read): while it is younger than the interval no checkpoint is due, whatever other processes stored since, so
# an append's receipts need not read the newest checkpoint (one round trip per group commit).
_STORED_AT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PENDING_STORED_AT = "hero_checkpoint_stored_at"


def _shared(s: Session) -> dict[tuple[int, int], bytes]:
    return _SHARED.setdefault(s.get_bind(), {})


@event.listens_for(Session, "after_commit")
def _promote(s: Session) -> None:
    pending = s.info.pop(_PENDING, None)
    if pending:
        shared = _shared(s)
        if len(shared) + len(pending) > _SHARED_MAX:
            shared.clear()
        shared.update(pending)
    stored_at = s.info.pop(_PENDING_STORED_AT, None)
    if stored_at is not None:
        bind = s.get_bind()
        _STORED_AT[bind] = max(stored_at, _STORED_AT.get(bind, stored_at))


@event.listens_for(Session, "after_rollback")
def _forget(s: Session) -> None:
    s.info.pop(_PENDING, None)
    s.info.pop(_PENDING_STORED_AT, None)


def _getter(s: Session, cache: dict[tuple[int, int], bytes], remember: bool = False):
    shared = _shared(s) if remember else {}
    if remember:
        cache = s.info.setdefault(_PENDING, cache)

    def get(level: int, idx: int) -> bytes:
        key = (level, idx)
        h = cache.get(key) or shared.get(key)
        if h is None:
            h = repo.tree_node(s, level, idx)
            if h is None:
                raise LogCorrupt(f"transparency log node ({level}, {idx}) is missing")
            cache[key] = h
        return h

    return get


def extend(s: Session, rows: Sequence[AuditEventRow]) -> None:
    """Adds the leaves of freshly appended events (contiguous, in order) to the tree."""
    if not rows:
        return
    cache: dict[tuple[int, int], bytes] = s.info.setdefault(_PENDING, {})
    shared = _shared(s)
    first = rows[0].idx - 1
    # Nodes another process appended are not in this one's memory: fetch the frontier in one query.
    frontier = frontier_nodes(first)
    cache.update(repo.tree_nodes(s, [k for k in frontier if k not in cache and k not in shared]))
    left = {}
    for key in frontier:
        h = cache.get(key) or shared.get(key)
        if h is None:
            raise LogCorrupt(f"transparency log node {key} is missing")
        left[key[0]] = h
    nodes = new_subtrees(left, first, [leaf_hash(leaf_data(r)) for r in rows])
    for lv, i, h in nodes:
        cache[lv, i] = h
    repo.add_tree_nodes(s, nodes)


def leaf_data(row: AuditEventRow | AppendedEvent) -> bytes:
    """The canonical bytes the row's hash covers: kept by the append path, else encoded again."""
    data = getattr(row, "leaf_data", None)
    return canonical_row(row) if data is None else data


def view(s: Session, remember: bool = False) -> TreeView:
    """The tree as stored; `remember` (append path only): through the committed-node memory."""
    return TreeView(_getter(s, {}, remember))


def size(s: Session) -> int:
    last = repo.head(s)
    return max(0, last.idx) if last else 0


def checkpoint(s: Session, signer: LogSigner, interval_s: float, at: int | None = None,
               tree: TreeView | None = None, tree_grown: bool = False) -> tuple[int, str]:
    """(size, signed note) for the tree at `at` (default: now). Stores it when the stored ones are stale. `tree`:
    the append path's view, whose right-edge hashes its receipts reuse. `tree_grown`: this transaction has just
    appended up to `at`, so no stored checkpoint covers it."""
    n = size(s) if at is None else at
    tree = tree if tree is not None else view(s, remember=True)
    stored_at = _STORED_AT.get(s.get_bind())
    if tree_grown and interval_s > 0 and stored_at is not None and time.time() - stored_at < interval_s:
        return n, signer.sign(n, tree.mth(0, n))  # none stored covers n, and none is due (see _STORED_AT)
    latest = repo.latest_checkpoint_ref(s)
    if latest is not None and latest[0] == n:
        return n, latest[1]
    note = signer.sign(n, tree.mth(0, n))
    due = latest is None or (latest[0] < n and time.time() - latest[2] >= interval_s)
    if interval_s > 0 and due:
        s.info[_PENDING_STORED_AT] = store(s, signer, n, note).created_at
    elif latest is not None:
        s.info[_PENDING_STORED_AT] = latest[2]
    return n, note


def store(s: Session, signer: LogSigner, n: int, note: str | None = None) -> CheckpointRow:
    existing = repo.checkpoint_at(s, n)
    if existing is not None:
        return existing
    root = view(s).mth(0, n)
    row = CheckpointRow(size=n, root=root, note=note or signer.sign(n, root), created_at=time.time())
    s.add(row)
    s.flush()
    return row


def receipts(s: Session, signer: LogSigner, rows: Sequence[AuditEventRow | AppendedEvent], interval_s: float
             ) -> list[dict]:
    """One receipt per row against one checkpoint covering all of them (signed now). `rows`: events as `append`
    returns them (contiguous, in order), so every inclusion proof comes from one walk of the tree."""
    if not rows:
        return []
    first, end = rows[0].idx - 1, rows[-1].idx
    if end - first != len(rows):
        raise ValueError("receipts are made for one contiguous run of appended events")
    tree = view(s, remember=True)
    n, note = checkpoint(s, signer, interval_s, at=end, tree=tree, tree_grown=True)
    proofs = tree.inclusion_proofs(first, end, n, b64)
    return [receipt_of(row_fields(r), r.idx - 1, p, note) for r, p in zip(rows, proofs, strict=True)]


def current_checkpoint(db, signer: LogSigner, interval_s: float) -> tuple[int, str]:
    """On demand: the newest stored checkpoint if it covers every event, else one signed (and stored) now."""
    with db.session() as s:
        n = size(s)
        latest = repo.latest_checkpoint(s)
        if latest is not None and latest.size == n:
            return n, latest.note
        row = store(s, signer, n)
        return row.size, row.note


def consistency(db, first: int, second: int) -> list[bytes]:
    with db.snapshot() as s:
        n = size(s)
        if second > n:
            raise ValueError(f"the log has {n} events; no tree of size {second}")
        return view(s).consistency_proof(first, second)
