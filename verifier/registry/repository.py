"""Provider rows: queries inside the caller's session (the caller owns the transaction)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from verifier.registry.models import ProviderRow


def get(s: Session, provider_id: str, *, for_update: bool = False) -> ProviderRow | None:
    q = select(ProviderRow).where(ProviderRow.provider_id == provider_id)
    if for_update:
        q = q.with_for_update()
    return s.execute(q).scalar_one_or_none()


def list_all(s: Session) -> list[ProviderRow]:
    return list(s.execute(select(ProviderRow).order_by(ProviderRow.provider_id)).scalars())
