"""The job interface the API talks to.

A `DecodeJob` carries no key material: only the profile name, the texts, and the caller's maximum
level. Whoever runs it (this process, or a Celery worker with its own DB/KEK access) decrypts the key
tables of levels 1..max_level itself, so least privilege holds across the queue too. Results are
plain JSON-able dicts (the shape of `DecodeResult.to_dict()`), plus undecodable entries for levels
whose keys are gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class DecodeJob:
    profile: str
    texts: tuple[str, ...]
    max_level: int
    alpha: float

    def __repr__(self) -> str:  # texts may be sensitive: never log them
        return f"DecodeJob(profile={self.profile!r}, texts={len(self.texts)}, max_level={self.max_level})"


class JobRunner(Protocol):
    def decode(self, job: DecodeJob, timeout: float | None = None) -> list[dict]:
        """Run (or enqueue and wait for) a decode job; raise DecodeError / KeyStoreError as the engine does."""
        ...

    def close(self) -> None: ...
