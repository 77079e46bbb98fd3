"""Domain errors: each carries the HTTP status it maps to, and a message that is safe to show a caller.

Services raise these; one exception handler in `verifier.app` turns any of them into `{"detail": ...}`
with `status`, and the CLI prints the same message. A subclass whose own message may quote paths or
internals sets `public_detail` to a fixed text the API returns instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar


class DomainError(Exception):
    status: ClassVar[int] = 400
    public_detail: ClassVar[str | None] = None  # fixed API text, when str(exc) must not leave the process
    headers: ClassVar[Mapping[str, str] | None] = None

    def detail(self) -> str:
        if self.public_detail is not None:
            return self.public_detail
        text = str(self)
        return text.splitlines()[0] if text else self.__class__.__name__


class InvalidInput(DomainError):
    status = 422


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
