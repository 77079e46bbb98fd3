"""The synchronous decode path of POST /v1/verify: a job object and the runner that decodes it in process.

A `DecodeJob` carries no key material: the loaded profile, the texts, the caller's maximum level and
alpha. The runner decrypts the key tables of levels 1..max_level only, so least privilege holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from verifier.engine.availability import make_decoder
from verifier.engine.decoder import DEFAULT_ALPHA, DecodeError, Decoder
from verifier.engine.profile import Profile
from verifier.keys.cache import MaterialCache
from verifier.keys.decodable import VerificationMaterial
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.verify.decode import TextNotDecodable, decode_material


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

    def token_evidence(self, profile: Profile, text: str) -> tuple[dict, list[tuple[int, int, float]]]:
        """Level-1 result of one text and its per-token evidence (see `InProcessRunner.token_evidence`)."""
        ...

    def close(self) -> None: ...


class InProcessRunner:
    """Decodes in the calling thread, with the verification material (and the decoder built on it) kept
    per profile and level in a `MaterialCache` checked against the key epoch on every call."""

    def __init__(self, store: DbKeyStore, tokenizers: TokenizerCache, alpha: float = DEFAULT_ALPHA,
                 scorer=None) -> None:
        self.store = store
        self.scorer = scorer  # model-aware scoring (HERO_MODEL_AWARE=1), None: model-free
        self.tokenizers = tokenizers
        self.alpha = alpha

        def prepare(profile: Profile, material: VerificationMaterial) -> Decoder | None:
            return make_decoder(profile, material.tables, alpha=self.alpha, unavailable=material.unavailable)

        self.cache = MaterialCache(store, prepare)

    def __repr__(self) -> str:
        return f"InProcessRunner({self.cache!r})"

    def decode(self, job: DecodeJob) -> list[dict]:
        entry = self.cache.get(job.profile, job.max_level)  # levels <= max_level only
        tokenizer = self.tokenizers(job.profile.tokenizer)
        decoder = entry.prepared if job.alpha == self.alpha else None
        return decode_material(entry.material, job.profile, list(job.texts), job.alpha, tokenizer, decoder=decoder,
                               scorer=self.scorer)

    def token_evidence(self, profile: Profile, text: str) -> tuple[dict, list[tuple[int, int, float]]]:
        """Level-1 decode of one text and, when its value is released, each scored token's evidence for it as
        (character start, character end, score). Level-1 material only, whatever the caller's role."""
        entry = self.cache.get(profile, 1)
        tokenizer = self.tokenizers(profile.tokenizer)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        decoder = entry.prepared or make_decoder(profile, entry.material.tables, alpha=self.alpha,
                                                 unavailable=entry.material.unavailable)
        try:
            result, evidence = decoder.token_evidence(enc["input_ids"])
        except DecodeError as exc:
            raise TextNotDecodable(str(exc).splitlines()[0] if str(exc) else "text cannot be decoded") from None
        offsets = enc["offset_mapping"]
        return result.to_dict(), [(int(offsets[p][0]), int(offsets[p][1]), score) for p, score in evidence]

    def close(self) -> None:
        self.cache.clear()  # decrypted material does not outlive the service
        self.tokenizers.clear()
