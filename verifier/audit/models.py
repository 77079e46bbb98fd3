"""ORM row of one audit event. `hash` = SHA-256(prev_hash || canonical JSON of the event fields)."""

from __future__ import annotations

from sqlalchemy import Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from verifier.db import Base


class AuditEventRow(Base):
    __tablename__ = "hero_audit_events"

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
    hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
