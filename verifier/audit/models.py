"""ORM rows of the audit log: events (`hash` = SHA-256(prev_hash || canonical JSON, in the form `canon` names)),
Merkle nodes, checkpoints."""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, LargeBinary, PrimaryKeyConstraint, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from verifier.base.db import Base


class AuditEventRow(Base):
    __tablename__ = "hero_audit_events"
    # the values one subject asked about one text (`expect`, verify/expect.py) without a scan (0008)
    __table_args__ = (Index("ix_hero_audit_events_text_subject", "text_sha256", "subject"),)

    idx: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    created_at: Mapped[str] = mapped_column(String(40), nullable=False)  # ISO-8601 UTC, hashed verbatim
    action: Mapped[str] = mapped_column(String(32), nullable=False)
    subject: Mapped[str] = mapped_column(String(256), nullable=False)
    role: Mapped[str] = mapped_column(String(64), nullable=False)
    jti: Mapped[str] = mapped_column(String(256), nullable=False)
    levels: Mapped[str] = mapped_column(String(64), nullable=False)  # e.g. "1,2"
    key_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    text_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    outcome: Mapped[str] = mapped_column(String(64), nullable=False)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)  # not indexed: nothing looks it up (0006)
    # the token issuer of the subject (0010); hashed only when set, so events written before it hash as they did
    issuer: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # the canonicalisation the event is hashed in (0014): "jcs" (RFC 8785) for events appended since; NULL for
    # those written before, hashed in Python json's form. Hashed when set, so it cannot be stripped
    # (verifier/audit/transparency.py, CANON_KEY)
    canon: Mapped[str | None] = mapped_column(String(16), nullable=True)


class ExpectAskRow(Base):
    """One value one subject asked about one text (`expect`, verify/expect.py): the counter behind the cap and the
    correction. Its primary key makes each (issuer, subject, text key, level, value) count once however many
    processes ask at once; rows are written in the audit transaction of the answer (or refusal) they count."""

    __tablename__ = "hero_expect_asks"
    __table_args__ = (PrimaryKeyConstraint("issuer", "subject", "text_key", "level", "value",
                                           name="pk_hero_expect_asks"),)

    issuer: Mapped[str] = mapped_column(String(256), nullable=False)  # "" for rows carried over from the log
    subject: Mapped[str] = mapped_column(String(256), nullable=False)
    text_key: Mapped[str] = mapped_column(String(80), nullable=False)  # verify/expect.text_key
    level: Mapped[int] = mapped_column(Integer, nullable=False)
    value: Mapped[int] = mapped_column(Integer, nullable=False)


class AuditTreeNodeRow(Base):
    """Hash of one perfect subtree of the transparency log: leaves [idx * 2^level, (idx + 1) * 2^level)."""

    __tablename__ = "hero_audit_tree"

    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32), nullable=False)


class CheckpointRow(Base):
    """A signed checkpoint (C2SP signed note) of the log at `size` events, kept for witnesses and audits."""

    __tablename__ = "hero_audit_checkpoints"

    size: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary(32), nullable=False)
    note: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
