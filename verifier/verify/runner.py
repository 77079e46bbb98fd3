"""The synchronous decode path of POST /v1/verify: a job object and the runner that decodes it in process.

A `DecodeJob` carries no key material: the loaded profile, the texts, the caller's maximum level and
alpha. The runner decrypts the key tables of levels 1..max_level only, so least privilege holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from verifier.engine.profile import Profile
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.verify.decode import decode_material


@dataclass(frozen=True)
class DecodeJob:
    profile: Profile
    texts: tuple[str, ...]
    max_level: int
    alpha: float

    def __repr__(self) -> str:  # texts may be sensitive: never log them
        return f"DecodeJob(profile={self.profile.name!r}, texts={len(self.texts)}, max_level={self.max_level})"


class DecodeRunner(Protocol):
    def decode(self, job: DecodeJob) -> list[dict]:
        """Decoder results (`DecodeResult.to_dict()`), unshaped; raises the service's domain errors."""
        ...

    def close(self) -> None: ...


class InProcessRunner:
    """Decodes in the calling (request worker) thread."""

    def __init__(self, store: DbKeyStore, tokenizers: TokenizerCache) -> None:
        self.store = store
        self.tokenizers = tokenizers

    def decode(self, job: DecodeJob) -> list[dict]:
        material = self.store.verification_material(job.profile, job.max_level)  # levels <= max_level only
        tokenizer = self.tokenizers(job.profile.tokenizer)
        return decode_material(material, job.profile, list(job.texts), job.alpha, tokenizer)

    def close(self) -> None:
        self.tokenizers.clear()
