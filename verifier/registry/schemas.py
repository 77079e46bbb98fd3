"""Provider API schemas: public data only (the bundle is ciphertext sealed to the provider's key)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from verifier.audit.schemas import ReceiptOut


class ProviderIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
                             description="the `sub` of the provider's tokens")
    issuer: str | None = Field(default=None, min_length=1, max_length=256,
                               description="the issuer (`iss`) of the provider's tokens: only that issuer's token "
                                           "with `sub` = provider_id is this provider. Default: the one issuer "
                                           "the service trusts; required when it trusts several")
    public_key: str = Field(min_length=1, max_length=2048,
                            description="base64 of the raw public key bundles are sealed to (32 bytes for x25519, "
                                        "1216 for mlkem768-x25519)")
    key_type: Literal["x25519", "mlkem768-x25519"] = Field(
        default="x25519", description="the HPKE KEM of hero-bundle-3: X25519, or the hybrid ML-KEM-768 + X25519")
    expires_at: datetime | None = Field(default=None, description="after this, bundle requests get 403")


class ProviderOut(BaseModel):
    provider_id: str
    issuer: str = Field(description="the issuer of the provider's tokens (\"\": registered before issuers were "
                                    "recorded, accepted only while the service trusts a single issuer)")
    public_key: str
    key_type: str
    status: str = Field(description="active | revoked")
    created_at: str | None
    created_by: str
    expires_at: str | None
    revoked_at: str | None


class ProviderListOut(BaseModel):
    providers: list[ProviderOut]


class BundleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    profile: str | None = Field(default=None, max_length=64, description="the service's profile (default: it)")


class BundleOut(BaseModel):
    bundle: str = Field(description="base64 of the sealed, service-signed bundle (hero-bundle-3, docs/providers.md)")
    etag: str = Field(description="send back as If-None-Match: 304 while the key set is unchanged")
    bundle_id: str
    profile: str
    key_versions: dict[str, str] = Field(description="active version per level, e.g. {'1': 'l1-v2'}")
    expires_at: str
    receipt: ReceiptOut | None = Field(default=None, description="transparency-log receipt of the issuance")
