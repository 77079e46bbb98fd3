"""ORM row of a registered provider: the (issuer, sub) it is, its public key and key type (public data), lifecycle."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from verifier.base.db import Base


class ProviderRow(Base):
    __tablename__ = "hero_providers"
    __table_args__ = (CheckConstraint("status IN ('active', 'revoked')", name="ck_hero_providers_status"),)

    provider_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    # the issuer whose tokens with `sub` = provider_id are this provider ("" registered before issuers were
    # recorded: accepted only while the deployment trusts a single issuer; verifier/registry/service.py)
    issuer: Mapped[str] = mapped_column(String(256), nullable=False, server_default="")
    public_key: Mapped[bytes] = mapped_column(LargeBinary(2048), nullable=False)
    key_type: Mapped[str] = mapped_column(String(32), nullable=False, server_default="x25519")  # hpke_keys
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_by: Mapped[str] = mapped_column(String(256), nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
