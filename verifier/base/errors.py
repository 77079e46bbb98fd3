"""Domain errors: each carries the HTTP status it maps to, and a message that is safe to show a caller.

Services raise these; one exception handler in `verifier.api.app` turns any of them into `{"detail": ...}`
with `status`, and the CLI prints the same message. A subclass whose own message may quote paths or
internals sets `public_detail` to a fixed text the API returns instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

ECHO_LIMIT = 64  # the most characters of a caller's input an error message repeats


def clip(value: object, limit: int = ECHO_LIMIT) -> str:
    """`repr(value)` cut to at most `limit` characters (an ellipsis marks the cut): what an error message may echo
    of a caller's input. Why: a 10,000-character field name or a 4,000-digit integer would otherwise come back
    whole in a 422, and into logs and clients that keep error texts."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DomainError(Exception):
    status: ClassVar[int] = 400
    public_detail: ClassVar[str | None] = None  # fixed API text, when str(exc) must not leave the process
    headers: ClassVar[Mapping[str, str] | None] = None

    def detail(self) -> str:
        if self.public_detail is not None:
            return self.public_detail
        text = str(self)
        return text.splitlines()[0] if text else self.__class__.__name__


class TokenizerMismatch(ValueError):
    """The tokenizer a profile names is not the one its keys were made with (different fingerprint or a larger
    vocabulary): decoding with it would score other token ids and report real watermarked text as human. Raised
    by verifier.lm (the profile's own record) and, as a 409, by the key store (what it recorded at key time)."""


class InvalidInput(DomainError):
    status = 422


class BadRequest(DomainError):
    """A request parameter the service never makes (e.g. a cursor that is not ASCII digits)."""

    status = 400


class TooLarge(DomainError):
    status = 413


class Unauthorized(DomainError):
    status = 401
    headers = MappingProxyType({"WWW-Authenticate": "Bearer"})


class Forbidden(DomainError):
    status = 403


class NotFound(DomainError):
    status = 404


class Conflict(DomainError):
    status = 409


class Unavailable(DomainError):
    status = 503
