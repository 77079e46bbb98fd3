"""The authenticated caller: token subject, role, token id, and what the server policy lets the role do."""

from __future__ import annotations

from dataclasses import dataclass

from verifier.audit.service import Actor


@dataclass(frozen=True)
class Principal:
    sub: str
    role: str
    jti: str
    max_level: int  # deepest level the role may see under the service's profile
    actions: frozenset[str]
    iss: str = ""  # token issuer: a caller is (iss, sub, role), never sub alone

    @property
    def actor(self) -> Actor:
        return Actor(self.sub, self.role, self.jti, self.iss)
