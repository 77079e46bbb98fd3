"""Key-management API schemas: metadata only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt


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


class KeyInitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: list[StrictInt] | None = Field(
        default=None, min_length=1, max_length=4096, examples=[[37, 41]],
        description="the model ids this deployment issues (as `hero keys init --models 37,41`): keys are made for "
        "the deployment's own copy of its profile (NAME-deployment, in its profiles folder) that searches and "
        "generates those ids only, and that copy is recorded as the profile the deployment serves")


class IssueIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: str = Field(default="model", pattern=r"^[a-z][a-z0-9_]{0,31}$", description="the field whose level "
                       "lists the issued values")
    values: list[StrictInt] = Field(min_length=1, max_length=4096, examples=[[42]],
                                    description="values to issue (already issued ones are kept, reported as such)")


class IssuedOut(BaseModel):
    profile: str = Field(description="the profile the deployment serves")
    field: str
    issued: list[int] | None = Field(description="the values issued at the field's level, sorted (null: the level "
                                     "searches every value, nothing issued)")
    added: list[int] | None = Field(default=None, description="POST only: the values this request issued")
    already_issued: list[int] | None = Field(default=None, description="POST only: values that were issued before")
