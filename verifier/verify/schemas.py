"""Verify API schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, StrictStr, Tag, WrapValidator
from pydantic_core import PydanticCustomError

from verifier.audit.schemas import ReceiptOut


class TextIn(BaseModel):
    """One text with its own `expect` ("is this text from model 37?", another value for the next text)."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr
    expect: dict[str, StrictInt] | None = Field(default=None, examples=[{"model": 37}])


def _one_item_error(value: Any, handler: Any) -> Any:
    """An item that is neither a string nor an object is one error naming the item (`texts.N`), not one per
    branch of the union; an object is checked as a TextIn only."""
    if not isinstance(value, str | dict):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    return handler(value)


TextItem = Annotated[
    Annotated[StrictStr, Tag("str")] | Annotated[TextIn, Tag("TextIn")],
    Discriminator(lambda v: "TextIn" if isinstance(v, dict) else "str"),
    WrapValidator(_one_item_error),
]


class VerifyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[TextItem] = Field(
        min_length=1,
        fail_fast=True,  # one error for a list of a million non-strings, not a million error objects
        description="texts to verify (UTF-8; limits: HERO_MAX_TEXTS, HERO_MAX_TEXT_CHARS): strings, or "
        "{\"text\": ..., \"expect\": {...}} objects that ask about a value of their own (beside plain strings; "
        "not together with the request-level `expect`)",
    )
    max_level: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="decode levels 1..max_level (default: the role's maximum; more than that is 403)",
    )
    expect: dict[str, StrictInt] | None = Field(
        default=None,
        description="ask about one value, e.g. {\"model\": 37}: every result then carries `expected`, the "
        "one-value test of that value (the tail of its own evidence: far more powerful than the search over all "
        "values). All fields of each named level; per-value levels only (spec v3's public level, v2's private "
        "levels: 422 otherwise); a level above the caller's maximum is 403.",
        examples=[{"model": 37}],
    )

    def plain_texts(self) -> list[str]:
        return [t if isinstance(t, str) else t.text for t in self.texts]

    def text_expects(self) -> list[dict[str, int] | None]:
        """Each text's own `expect` (None for a plain string or an object without one)."""
        return [None if isinstance(t, str) else t.expect for t in self.texts]


class ExpectedOut(BaseModel):
    """The one-value test of a value the caller named (`expect`)."""

    level: int = Field(description="the level of the named fields")
    fields: dict[str, int] = Field(description="the value asked about")
    p_value: float = Field(description="probability of evidence at least this strong for this value in text "
                           "not made with it (uniform under that null; corrected for the key versions tried and for "
                           "`values_asked`: min(1, values_asked x the one-value p))")
    log10_p_value: float = Field(description="log10 of p_value (keeps its digits below 1e-308)")
    matches: bool = Field(description="p_value <= alpha (after the correction): the text carries this value's "
                          "watermark")
    values_asked: int = Field(default=1, description="distinct values of this level the caller has asked about this "
                              "text, this one included (from the audit log, where each is recorded): p_value is "
                              "corrected for them; at most HERO_EXPECT_MAX_VALUES, further ones are refused (403)")
    correction: Literal["bonferroni-over-asked"] = Field(
        default="bonferroni-over-asked", description="how p_value accounts for the values asked: Bonferroni over "
        "`values_asked` (docs/service.md, `expect`)")


class CandidateOut(BaseModel):
    """One value a `mixed` level's evidence supports on its own."""

    fields: dict[str, int | None] = Field(description="the candidate's field values")
    p_value: float = Field(description="this value's own p-value (corrected for the values and regions searched)")
    tokens: int = Field(description="scored tokens of the region that supports it")


class SpanOut(BaseModel):
    """A stretch of the text attributed to one value (a `mixed` level with a change point)."""

    start: int = Field(description="first token position (the verifier's tokenisation of the text)")
    end: int = Field(description="token position after the span (exclusive)")
    fields: dict[str, int | None] = Field(description="the value this span carries")


class LevelOut(BaseModel):
    """One level (only levels up to the caller's role maximum are present). See docs/service.md, "Reading a result"."""

    level: int = Field(description="1 = public level (e.g. `model`); deeper levels are private (e.g. `user`)")
    key_version: str | None = Field(
        description="key version of this level that matched, e.g. `l2-v1`; null unless this level's own p-value "
        "is <= alpha (an absent level names no version)"
    )
    fields: dict[str, int | None] | None = Field(
        description="field values, released only when `status` is `decoded` (this level's own evidence supports "
        "one value); every value is null otherwise"
    )
    confidence: float = Field(
        description="probability that the released value is exactly right (spec v2, section 13.6); 0 when no "
        "value is released. v1 profiles: the decoder's plug-in estimate",
    )
    p_value: float = Field(
        description="this level's own p-value: probability of evidence at least this strong in text without "
        "the watermark, corrected for the candidate values (`searched`) and the key versions tried",
    )
    searched: int | None = Field(
        default=None, description="how many values this level's search covered, the count its p-value is corrected "
        "for: a spec v4 level's issued values (e.g. the deployment's 4 model ids), else every value of a per-value "
        "level (2^bits), or 2^b per segment of a segmented level",
    )
    status: str = Field(
        description="decoded (one value supported) | detected (this level's own evidence is significant but no "
        "single value meets the release rule, or the text is not called watermarked: value withheld, fields null, "
        "see `reason`) | absent (not significant: this level's p-value misses alpha, which is not a finding that "
        "the level is unmarked; `reason` gives the p-value; fields null) | mixed "
        "(two or more values each significant: see `candidates`; fields null) | undecodable (keys gone or "
        "nothing scored: see `reason`)"
    )
    reason: str | None = Field(description="why the level is not decoded, in words; null otherwise")
    candidates: list[CandidateOut] | None = Field(
        default=None, description="`mixed` only: each supported value, best first"
    )
    spans: list[SpanOut] | None = Field(
        default=None, description="`mixed` only, when a change point is found: which tokens carry which value"
    )


class ResultOut(BaseModel):
    """The verdict on one text, in input order. See docs/service.md, "Reading a result"."""

    watermarked: bool = Field(
        description="true when `p_value` <= HERO_ALPHA (default 1e-4) and at least one token was scored"
    )
    p_value: float = Field(
        description="combination of the per-level p-values decoded for this caller (exact tail of min(level 1's "
        "p-value, their Fisher combination): within 2x of level 1's): it differs between roles (a moderator sees "
        "level 1 only) and grows with the number of key versions tried after a rotation",
    )
    key_version: str | None = Field(
        description="level-1 key version the text matched, e.g. `l1-v2`; null unless level 1's own "
        "p-value is <= alpha (a text watermarked through a deeper level alone names none)"
    )
    tokens_scored: int = Field(
        description="tokens that carry evidence: the first tokens without a full context and tokens whose "
        "context repeats are not scored",
    )
    flags: list[str] = Field(
        default_factory=list,
        description="warnings on the whole result: `inconsistent-levels` (level 1 decoded while a deeper level held "
        "by this caller shows no sign of its mark: absent with p >= 0.01 over >= 100 scored tokens; a level merely "
        "short of alpha is not flagged), `mixed-sources` (some level is mixed)",
    )
    spec_version: int | None = Field(default=None, description="watermark spec version of the profile used")
    profile: str | None = Field(
        default=None,
        # absent (not null) on results stored before the field existed: they serialise, and hash into their
        # receipts, exactly as before
        exclude_if=lambda v: v is None,
        description="the profile whose keys this result was decoded with: the profile the deployment serves, or "
        "an earlier one it served (its keys are kept: `hero profile use`) when that explains the text best. With "
        "keys of P profiles every p-value here is Bonferroni-corrected for the P profiles tried (min(1, P x p)) "
        "and `watermarked` is read on the corrected values; the released result is the profile's with the "
        "smallest corrected p-value (ties: the served profile)",
    )
    scoring: Literal["model-free", "model-aware"] = Field(
        default="model-free",
        description="how the evidence was weighed: `model-free` (every scored token alike, the default) or "
        "`model-aware` (the service re-ran the profile's language model over the text and weighted each token "
        "by how much evidence it can carry; HERO_MODEL_AWARE=1)",
    )
    levels: list[LevelOut] = Field(description="one entry per decoded level, level 1 first")
    expected: list[ExpectedOut] | None = Field(
        default=None,
        # absent (not null) unless asked: a result without it serialises, and so hashes into its receipt, exactly
        # as before `expect` existed (stored job results and their receipts stay valid)
        exclude_if=lambda v: v is None,
        description="only when the request named a value (`expect`): its one-value test, per level",
    )


class VerifiedOut(ResultOut):
    receipt: ReceiptOut = Field(description="transparency-log receipt of this text's audit event")


class VerifyOut(BaseModel):
    results: list[VerifiedOut] = Field(description="one result per input text, in input order")


class EvidenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: StrictStr = Field(min_length=1, description="one text (limit: HERO_MAX_TEXT_CHARS)")


class TokenEvidenceOut(BaseModel):
    start: int = Field(description="first character of the token in `text`")
    end: int = Field(description="one past its last character")
    evidence: float = Field(
        description="the token's score for the level-1 value the whole text supports: Exp(1) without the "
        "watermark (mean 1); "
        "watermarked tokens score higher on average, single tokens are noisy"
    )


class EvidenceOut(BaseModel):
    watermarked: bool = Field(description="level-1 p-value <= HERO_ALPHA")
    p_value: float = Field(description="level 1's p-value (level 1 only, whatever the caller's role)")
    status: str = Field(description="level 1's status: decoded | detected | absent | mixed | undecodable")
    key_version: str | None = Field(description="the level-1 key version that scored the text")
    fields: dict[str, int | None] = Field(description="level-1 (public) fields; values only when `decoded`")
    tokens: list[TokenEvidenceOut] = Field(
        description="scored tokens with their evidence, in text order; empty unless level 1's own evidence is "
        "significant (`decoded`, `detected` or `mixed`) "
        "(tokens whose context repeats an earlier one are not scored and not listed)"
    )
    receipt: ReceiptOut | None = Field(default=None, description="transparency-log receipt of this disclosure")
