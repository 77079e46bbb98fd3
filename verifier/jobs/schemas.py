"""Job API schemas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from verifier.verify.schemas import ResultOut


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, description="texts (limits: HERO_JOB_MAX_TEXTS, HERO_MAX_TEXT_CHARS)")
    max_level: int | None = Field(default=None, ge=1, le=64, description="default: the role's maximum")


class JobAccepted(BaseModel):
    job_id: str


class Progress(BaseModel):
    total: int
    done: int


class JobOut(BaseModel):
    job_id: str
    status: str = Field(description="queued | running | done | failed")
    progress: Progress
    max_level: int
    created_at: str | None
    updated_at: str | None
    error: str | None
    results: list[ResultOut] | None = Field(description="in input order, once status is done (as /v1/verify)")
