"""ORM rows of decode jobs (migrations 0002, 0003). Times are UNIX epoch seconds (float) on every backend."""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from verifier.base.db import Base


class JobRow(Base):
    __tablename__ = "hero_jobs"
    __table_args__ = (
        CheckConstraint("status IN ('queued', 'running', 'done', 'failed')", name="ck_hero_jobs_status"),
        Index("ix_hero_jobs_status_updated", "status", "updated_at"),
        UniqueConstraint("owner_iss", "owner_sub", "role", "idempotency_key", name="uq_hero_jobs_idempotency"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_sub: Mapped[str] = mapped_column(String(256), nullable=False)
    owner_iss: Mapped[str] = mapped_column(String(256), nullable=False, default="", server_default="")
    role: Mapped[str] = mapped_column(String(64), nullable=False)
    jti: Mapped[str] = mapped_column(String(256), nullable=False)
    max_level: Mapped[int] = mapped_column(Integer, nullable=False)
    profile: Mapped[str] = mapped_column(String(64), nullable=False)
    alpha: Mapped[float] = mapped_column(Float, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    total: Mapped[int] = mapped_column(Integer, nullable=False)
    done: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)
    enqueued_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    kek_id: Mapped[str] = mapped_column(String(64), nullable=False)
    wrapped_dek: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    keys_handed: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON {level: [versions]}, no bytes
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)  # per owner (migration 0009)
    request_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)  # of the request the key made

    def __repr__(self) -> str:
        return f"JobRow(id={self.id!r}, status={self.status!r}, done={self.done}/{self.total})"


class JobItemRow(Base):
    __tablename__ = "hero_job_items"
    __table_args__ = (
        UniqueConstraint("job_id", "idx", name="uq_hero_job_items_idx"),
        CheckConstraint("status IN ('pending', 'claimed', 'done')", name="ck_hero_job_items_status"),
        Index("ix_hero_job_items_job_status", "job_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36), ForeignKey("hero_jobs.id", ondelete="CASCADE"), nullable=False)
    idx: Mapped[int] = mapped_column(Integer, nullable=False)
    nonce: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # dropped once decoded
    text_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(256), nullable=True)
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    done_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    def __repr__(self) -> str:
        return f"JobItemRow(job={self.job_id!r}, idx={self.idx}, status={self.status!r})"
