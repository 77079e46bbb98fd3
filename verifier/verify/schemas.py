"""Verify API schemas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from verifier.audit.schemas import ReceiptOut


class VerifyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(
        min_length=1, description="texts to verify (UTF-8; limits: HERO_MAX_TEXTS, HERO_MAX_TEXT_CHARS)"
    )
    max_level: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="decode levels 1..max_level (default: the role's maximum; more than that is 403)",
    )


class LevelOut(BaseModel):
    level: int
    key_version: str | None
    fields: dict[str, int | None] | None
    confidence: float
    p_value: float
    status: str = Field(description="decoded | undecodable")
    reason: str | None


class ResultOut(BaseModel):
    watermarked: bool
    p_value: float
    key_version: str | None
    tokens_scored: int
    levels: list[LevelOut]


class VerifiedOut(ResultOut):
    receipt: ReceiptOut = Field(description="transparency-log receipt of this text's audit event")


class VerifyOut(BaseModel):
    results: list[VerifiedOut]
