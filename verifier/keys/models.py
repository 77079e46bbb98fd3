"""ORM row of one watermark key version (ciphertext only; NULLs once destroyed)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from verifier.base.db import Base


class KeyVersionRow(Base):
    __tablename__ = "hero_key_versions"
    __table_args__ = (
        UniqueConstraint("profile", "level", "seq", name="uq_hero_key_versions_seq"),
        UniqueConstraint("profile", "version", name="uq_hero_key_versions_version"),
        CheckConstraint(
            "status IN ('active', 'verify-only', 'disabled', 'destroyed')", name="ck_hero_key_versions_status"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    profile: Mapped[str] = mapped_column(String(64), nullable=False)
    level: Mapped[int] = mapped_column(Integer, nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False)
    version: Mapped[str] = mapped_column(String(32), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    kek_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    wrapped_dek: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    nonce: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    status_changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    destroyed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Recorded when the version is made (migration 0011; NULL on versions made before): the SHA-256 of the
    # profile's tokenizer as parsed (verifier.lm.tokenizer_fingerprint; NULL for a built-in, pinned by its package
    # version), which decoding with these keys must match, and the profile's digest (verifier.engine.profile.
    # profile_digest) at that time.
    tokenizer_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    profile_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)


class KeyEpochRow(Base):
    """Per-profile counter bumped in the same transaction as every key change (init, rotate, disable,
    enable, destroy): processes holding decrypted material compare it per batch to see another
    process's change at once (verifier.keys.cache)."""

    __tablename__ = "hero_key_epochs"

    profile: Mapped[str] = mapped_column(String(64), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False)


class DeploymentSettingRow(Base):
    """One setting of the deployment, kept with its keys (migration 0013): `served_profile`, the profile the
    deployment serves (`hero profile use NAME`; verifier/keys/deployment.py)."""

    __tablename__ = "hero_deployment_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
