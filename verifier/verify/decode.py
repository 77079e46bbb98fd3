"""The decode body of the runner (verifier.verify.runner), which serves /v1/verify, decode jobs and `hero decode`.

It hands the engine exactly the key material the caller fetched and passes the engine's results
through: every level verdict (status, reason, fields) is the engine's.
"""

from __future__ import annotations

from verifier.base.errors import InvalidInput, TooLarge
from verifier.engine.decoder import DecodeError, Decoder, decode_texts
from verifier.engine.model_aware import TooManyTokens
from verifier.engine.profile import Profile
from verifier.keys.decodable import VerificationMaterial


class TextNotDecodable(InvalidInput):
    """The input cannot be decoded at all (empty text, ids outside the vocabulary): 422."""


def decode_material(
    material: VerificationMaterial, profile: Profile, texts: list[str], alpha: float, tokenizer, device: str = "cpu",
    decoder: Decoder | None = None, scorer=None,
) -> list[dict]:
    """Decoder results as plain dicts (`DecodeResult.to_dict()`), levels 1..n of the material only;
    `decoder`: one prepared for this material (verifier.keys.cache), reused across calls; `scorer`: model-aware
    scoring (HERO_MODEL_AWARE=1, verifier.engine.model_aware.ModelAwareScorer) or None (model-free)."""
    tables, unavailable, missing = material.tables, material.unavailable, material.missing
    not_tried = material.not_tried
    del material  # the tables live only as long as this call needs them
    try:
        results = decode_texts(
            profile, tables, texts, tokenizer, alpha=alpha, unavailable=unavailable, missing=missing,
            not_tried=not_tried, device=device, decoder=decoder, scorer=scorer,
        )
    except TooManyTokens as exc:
        raise TooLarge(str(exc)) from None
    except DecodeError as exc:
        raise TextNotDecodable(str(exc).splitlines()[0] if str(exc) else "text cannot be decoded") from None
    return [r.to_dict() for r in results]
