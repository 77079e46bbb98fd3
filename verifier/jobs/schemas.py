"""Job API schemas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from verifier.audit.schemas import ReceiptOut
from verifier.verify.schemas import ResultOut


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, fail_fast=True,  # one error, not one per item
                                   description="texts (limits: HERO_JOB_MAX_TEXTS, HERO_MAX_TEXT_CHARS)")
    max_level: int | None = Field(default=None, ge=1, le=64, description="default: the role's maximum")


class JobAccepted(BaseModel):
    job_id: str = Field(description="poll GET /v1/jobs/{job_id} (also in the `Location` header)")


class Progress(BaseModel):
    total: int = Field(description="texts in the job")
    done: int = Field(description="texts decoded and stored so far")


class JobState(BaseModel):
    """What every view of a job shows: where it stands."""

    job_id: str
    status: str = Field(description="queued | running | done | failed")
    progress: Progress = Field(description="texts done out of the total")
    max_level: int = Field(description="deepest level decoded for this job")
    created_at: str | None = Field(description="ISO-8601 UTC")
    updated_at: str | None = Field(description="ISO-8601 UTC")
    error: str | None = Field(description="why the job failed, in words")


class JobSummary(JobState):
    subject: str = Field(description="the submitting token's subject")
    role: str = Field(description="the submitting token's role")


class JobListOut(BaseModel):
    jobs: list[JobSummary] = Field(description="newest first; no results (read each job for those)")
    next_offset: int | None = Field(description="offset of the next page; null on the last page")


class IndexedResult(ResultOut):
    index: int = Field(description="the text's position in the job's input (0-based)")


class JobResultsPage(BaseModel):
    """One page of a done job's results (GET /v1/jobs/{job_id}/results)."""

    job_id: str
    total: int = Field(description="texts in the job")
    results: list[IndexedResult] = Field(description="in input order, from the cursor on")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null after the last")
    receipt: ReceiptOut | None = Field(
        default=None, description="transparency-log receipt of this page's read (`jobs.read` event)"
    )


class JobOut(JobState):
    results: list[ResultOut] | None = Field(description="in input order, once status is done (as /v1/verify)")
    receipt: ReceiptOut | None = Field(
        default=None, description="transparency-log receipt of this read (`jobs.read` event), when results are released"
    )
