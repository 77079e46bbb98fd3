"""Admission: what a request must pass before any work is done for it, for /v1/verify, decode jobs and `hero decode`.

- `check_texts` (and `text_limits`, the same limits in words): how many texts, how long, non-empty, valid Unicode
  (413 / 422);
- `check_lm_tokens`: the LM tokens model-aware scoring would read, per text and per request (413);
- `charge_quota`: the caller's quotas on texts and LM tokens (429 + Retry-After).

The level itself is granted once per request by `Policy.grant` (verifier.auth.policy), before these checks
(verifier.api.context `ServiceContext.admit` runs them in order). What a caller may then see, and what is recorded
about it, is verify/disclosure.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

from verifier.auth.policy import Policy
from verifier.auth.principal import Principal
from verifier.base.errors import InvalidInput, TooLarge
from verifier.base.ratelimit import RateLimiter


def charge_quota(limiter: RateLimiter, policy: Policy, principal: Principal, n: int, lm_tokens: int = 0) -> None:
    """Counts n texts (and the LM tokens model-aware scoring will read) against the caller's quotas: RateLimited
    (429 + Retry-After) when over."""
    role = policy.role(principal.role)
    limiter.charge(principal.role, f"{principal.iss}:{principal.sub}", role.limits if role else None, n, lm_tokens)


def check_lm_tokens(lengths: Sequence[int], max_tokens: int, max_request_tokens: int | None) -> int:
    """The LM tokens model-aware scoring would read (their sum), or TooLarge (413) naming the cap a text or the
    request passes: checked before any quota is charged and before the LM runs."""
    for i, n in enumerate(lengths):
        if n > max_tokens:
            raise TooLarge(f"text {i} is {n} tokens long; model-aware scoring reads at most {max_tokens} tokens per "
                           "text (HERO_MODEL_AWARE_MAX_TOKENS)")
    total = sum(lengths)
    if max_request_tokens is not None and total > max_request_tokens:
        raise TooLarge(f"the texts are {total} tokens long in all; model-aware scoring reads at most "
                       f"{max_request_tokens} tokens per request (HERO_MODEL_AWARE_MAX_REQUEST_TOKENS)")
    return total


def text_limits(max_texts: int, max_chars: int) -> str:
    """Both text limits in words: every answer about one limit names the others too (one answer, not three)."""
    return f"at most {max_texts} text{'s' if max_texts != 1 else ''} per request and {max_chars} characters per text"


def check_texts(texts: Sequence[str], max_texts: int, max_chars: int) -> None:
    """The input limits; a message numbers texts from 1, as a person counts them, and names only the limit hit."""
    if len(texts) > max_texts:
        raise TooLarge(f"too many texts: {len(texts)} (at most {max_texts} text{'s' if max_texts != 1 else ''} "
                       "per request)")
    for i, t in enumerate(texts, start=1):
        if len(t) > max_chars:
            raise TooLarge(f"text {i} is too long: {len(t)} characters (at most {max_chars} characters per text)")
        if not t.strip():
            raise InvalidInput(f"text {i} is empty")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"text {i} is not valid Unicode (lone surrogate)") from None
