"""Key-management API schemas: metadata only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class KeyVersionOut(BaseModel):
    profile: str
    level: int
    version: str
    status: str = Field(description="active | verify-only | disabled | destroyed")
    created_at: str | None
    status_changed_at: str | None
    destroyed_at: str | None
    kek_id: str | None = Field(description="id of the KEK wrapping this version's data key (null once destroyed)")
    tokenizer_fingerprint: str | None = Field(
        default=None, description="SHA-256 of the profile's tokenizer (as parsed) this version was made with; "
                                  "decoding with another is refused (null: a built-in tokenizer, or made before "
                                  "key-time pinning)")
    profile_digest: str | None = Field(
        default=None, description="SHA-256 of the profile's definition (RFC 8785 JSON) when this version was made")


class KeyListOut(BaseModel):
    profile: str
    levels: int
    versions: list[KeyVersionOut]


class DestroyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm: str = Field(max_length=64, description="must repeat the version id, e.g. 'l1-v1'")
