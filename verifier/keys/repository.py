"""Queries on key-version rows. Callers own the transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from verifier.keys.models import KeyEpochRow, KeyVersionRow

if TYPE_CHECKING:
    from verifier.base.db import Database


def list_versions(s: Session, profile: str, max_level: int | None = None) -> list[KeyVersionRow]:
    q = select(KeyVersionRow).where(KeyVersionRow.profile == profile)
    if max_level is not None:
        # Least privilege at the query: rows above the caller's level are never even read.
        q = q.where(KeyVersionRow.level <= max_level)
    return list(s.scalars(q.order_by(KeyVersionRow.level, KeyVersionRow.seq)))


def level_rows(s: Session, profile: str, level: int, *, for_update: bool = False) -> list[KeyVersionRow]:
    q = (
        select(KeyVersionRow)
        .where(KeyVersionRow.profile == profile, KeyVersionRow.level == level)
        .order_by(KeyVersionRow.seq)
    )
    if for_update:
        q = q.with_for_update()
    return list(s.scalars(q))


def next_seq(s: Session, profile: str, level: int) -> int:
    cur = s.scalar(
        select(func.max(KeyVersionRow.seq)).where(KeyVersionRow.profile == profile, KeyVersionRow.level == level)
    )
    return int(cur or 0) + 1


def get_version(s: Session, profile: str, version: str, *, for_update: bool = False) -> KeyVersionRow | None:
    q = select(KeyVersionRow).where(KeyVersionRow.profile == profile, KeyVersionRow.version == version)
    if for_update:
        q = q.with_for_update()
    return s.scalars(q).first()


def count_profile(s: Session, profile: str) -> int:
    return int(s.scalar(select(func.count()).select_from(KeyVersionRow).where(KeyVersionRow.profile == profile)) or 0)


def all_sealed(s: Session) -> list[KeyVersionRow]:
    return list(
        s.scalars(select(KeyVersionRow).where(KeyVersionRow.ciphertext.is_not(None)).with_for_update())
    )


def current_epoch(db: Database, profile: str) -> int:
    """The profile's key epoch (0 before any key change was recorded), read outside any transaction through
    the driver: the material cache reads it once per batch."""
    return int(db.scalar("SELECT epoch FROM hero_key_epochs WHERE profile = ?", profile) or 0)


def bump_epoch(s: Session, profile: str) -> None:
    """Marks a key change; commits with the caller's transaction (so readers never see it early)."""
    res = s.execute(update(KeyEpochRow).where(KeyEpochRow.profile == profile).values(epoch=KeyEpochRow.epoch + 1))
    if not res.rowcount:
        s.add(KeyEpochRow(profile=profile, epoch=1))
        s.flush()
