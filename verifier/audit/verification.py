"""Checking the audit log: its hash chain, its Merkle tree, and checkpoints signed earlier.

Everything runs on a read snapshot (`Database.snapshot`): a walk over millions of events never holds
the write lock, so disclosures keep being recorded meanwhile. The chain alone cannot see a truncated
or re-hashed tail; a checkpoint published earlier (stored here, held by a witness, or passed with
`hero audit verify --against FILE`) can: the log must still contain its tree, unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from verifier.audit import repository as repo
from verifier.audit.chain import GENESIS, compute_hash, row_fields
from verifier.audit.models import AuditTreeNodeRow
from verifier.audit.transparency import Checkpoint, Frontier, TransparencyError, event_leaf, open_checkpoint
from verifier.base.db import Database

Problem = Literal["truncated", "rewritten", "forked", "checkpoint"]


@dataclass
class ChainReport:
    valid: bool
    events: int
    first_broken_index: int | None = None
    reason: str | None = None
    head_hash: str | None = None
    root_hash: str | None = None
    checkpoint_size: int | None = None
    problem: Problem | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class _Walk:
    """Result of walking the stored events from index 1."""

    events: int  # contiguous, chain-valid events
    roots: dict[int, bytes]  # tree size -> recomputed root, for the sizes asked for
    broken_at: int | None
    reason: str | None
    head_hash: str | None
    root: bytes
    tree_broken_at: int | None = None  # first event whose stored Merkle leaf is missing or different


def _walk(s: Session, sizes: set[int]) -> _Walk:
    fr = Frontier()
    roots: dict[int, bytes] = {}
    prev, expected = GENESIS, 1
    if 0 in sizes:
        roots[0] = fr.root()
    stored: dict[int, bytes] = {}
    tree_broken: int | None = None
    for row in repo.iterate(s):
        if row.idx != expected:
            why = (f"event with invalid index {row.idx} (indices start at 1)" if row.idx < 1
                   else f"event {expected} is missing (found {row.idx})")
            return _Walk(expected - 1, roots, expected, why, None, fr.root(), tree_broken)
        if row.prev_hash != prev:
            return _Walk(expected - 1, roots, expected, "prev_hash does not match the previous event", None, fr.root(),
                         tree_broken)
        fields = row_fields(row)  # `canon` among them picks each event's canonicalisation: a log may mix both
        try:
            hashed, leaf = compute_hash(prev, fields), event_leaf(fields)
        except TransparencyError as exc:  # a marker this code does not know: never guessed
            return _Walk(expected - 1, roots, expected, f"event cannot be hashed: {exc}", None, fr.root(),
                         tree_broken)
        if hashed != row.hash:
            return _Walk(expected - 1, roots, expected, "event content does not match its hash", None, fr.root(),
                         tree_broken)
        if expected not in stored:  # level-0 nodes in pages: receipts are built from them
            stored = dict(
                s.execute(
                    select(AuditTreeNodeRow.idx, AuditTreeNodeRow.hash).where(
                        AuditTreeNodeRow.level == 0,
                        AuditTreeNodeRow.idx >= expected - 1,
                        AuditTreeNodeRow.idx < expected - 1 + 1000,
                    )
                ).all()
            )
            stored = {i + 1: h for i, h in stored.items()}
        if stored.get(expected) != leaf and tree_broken is None:
            tree_broken = expected
        fr.append(leaf)
        if fr.size in sizes:
            roots[fr.size] = fr.root()
        prev, expected = row.hash, expected + 1
    return _Walk(expected - 1, roots, None, None, prev if expected > 1 else None, fr.root(), tree_broken)


def _verified_checkpoints(s: Session, vkey: str | None) -> list[Checkpoint]:
    """Stored checkpoints whose signature holds (all stored ones when no key is given), newest first."""
    out = []
    for row in repo.checkpoints(s):
        try:
            cp = open_checkpoint(row.note, vkey) if vkey else Checkpoint("", row.size, row.root)
        except TransparencyError:
            continue
        if cp.size == row.size and cp.root == row.root:
            out.append(cp)
    return out


def verify_chain(db: Database, vkey: str | None = None) -> ChainReport:
    """Chain + tree of every event, and the newest stored checkpoint must still be the tree's prefix."""
    with db.snapshot() as s:
        cps = _verified_checkpoints(s, vkey)
        latest = cps[0] if cps else None
        w = _walk(s, {latest.size} if latest else set())
    root = w.root.hex()
    if w.tree_broken_at is not None and (w.broken_at is None or w.tree_broken_at < w.broken_at):
        w.broken_at, w.reason = w.tree_broken_at, "event does not match its transparency-log leaf"
    if w.broken_at is not None:
        return ChainReport(False, w.events, w.broken_at, w.reason, None, None,
                           latest.size if latest else None, "rewritten")
    if latest is not None:
        if w.events < latest.size:
            return ChainReport(False, w.events, w.events + 1,
                               f"log truncated: {w.events} events, but a checkpoint was signed at size {latest.size}",
                               w.head_hash, root, latest.size, "truncated")
        if w.roots[latest.size] != latest.root:
            return ChainReport(False, w.events, None,
                               f"events 1..{latest.size} no longer match the checkpoint signed at that size",
                               w.head_hash, root, latest.size, "rewritten")
    return ChainReport(True, w.events, None, None, w.head_hash, root, latest.size if latest else None)


def verify_against(db: Database, note: str, vkey: str, origin: str | None = None) -> ChainReport:
    """Checks the log against a checkpoint published earlier (e.g. kept by a witness or an auditor).

    truncated: the log has fewer events than the checkpoint; rewritten: events 1..size no longer hash to
    its root (or the chain breaks before it); forked: the log itself signed a different history of
    those events (two valid checkpoints that cannot both be true).
    """
    try:
        cp = open_checkpoint(note, vkey, origin)
    except TransparencyError as exc:
        return ChainReport(False, 0, None, f"checkpoint rejected: {exc}", problem="checkpoint")
    with db.snapshot() as s:
        own = _verified_checkpoints(s, vkey)
        w = _walk(s, {cp.size} | {c.size for c in own})
    root = w.root.hex()
    if w.broken_at is not None and w.broken_at <= cp.size:
        return ChainReport(False, w.events, w.broken_at, f"log rewritten: event {w.broken_at}: {w.reason}",
                           None, None, cp.size, "rewritten")
    if w.events < cp.size:
        return ChainReport(False, w.events, w.events + 1,
                           f"log truncated: it holds {w.events} events, the checkpoint proves {cp.size} existed "
                           f"(events {w.events + 1}..{cp.size} removed)", w.head_hash, root, cp.size, "truncated")
    if w.roots[cp.size] != cp.root:
        for other in own:
            if other.size >= cp.size and w.roots.get(other.size) == other.root:
                return ChainReport(False, w.events, None,
                                   f"log forked: its own checkpoint at size {other.size} and this checkpoint at "
                                   f"size {cp.size} are both signed but disagree on events 1..{cp.size}",
                                   w.head_hash, root, cp.size, "forked")
        return ChainReport(False, w.events, None,
                           f"log rewritten: events 1..{cp.size} no longer hash to the checkpoint's root",
                           w.head_hash, root, cp.size, "rewritten")
    if w.tree_broken_at is not None and (w.broken_at is None or w.tree_broken_at < w.broken_at):
        w.broken_at, w.reason = w.tree_broken_at, "event does not match its transparency-log leaf"
    if w.broken_at is not None:
        return ChainReport(False, w.events, w.broken_at, f"log rewritten: event {w.broken_at}: {w.reason}",
                           None, None, cp.size, "rewritten")
    return ChainReport(True, w.events, None, None, w.head_hash, root, cp.size)
