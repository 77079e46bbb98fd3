"""The decode task body, shared by the in-process runner, in-process jobs and Celery workers."""

from __future__ import annotations

import threading
from typing import Any

from verifier.engine.decoder import Decoder
from verifier.engine.profile import Profile
from verifier.keys.service import DbKeyStore, VerificationMaterial


class LockedTokenizer:
    """HF fast tokenizers are not safe to call from several threads at once: serialise calls."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._tok(*args, **kwargs)


def undecodable_level(level: int, reason: str) -> dict:
    return {
        "level": level,
        "key_version": None,
        "fields": None,
        "confidence": 0.0,
        "p_value": 1.0,
        "log10_p_value": 0.0,
        "status": "undecodable",
        "reason": reason,
    }


def run_decode(
    store: DbKeyStore, profile: Profile, texts: list[str], max_level: int, alpha: float, tokenizer
) -> list[dict]:
    material = store.verification_material(profile, max_level)  # decrypts levels <= max_level only
    return decode_with_material(material, profile, texts, alpha, tokenizer)


def decode_with_material(
    material: VerificationMaterial, profile: Profile, texts: list[str], alpha: float, tokenizer, device: str = "cpu"
) -> list[dict]:
    """Decode with key material the caller already fetched (workers fetch it through one audited function)."""
    if not material.tables:
        return [
            {
                "watermarked": False,
                "p_value": 1.0,
                "log10_p_value": 0.0,
                "key_version": None,
                "tokens_scored": 0,
                "levels": [undecodable_level(lv, r) for lv, r in sorted(material.missing.items())],
            }
            for _ in texts
        ]
    missing = dict(material.missing)
    decoder = Decoder(profile, material.tables, alpha=alpha, unavailable=material.unavailable, device=device)
    del material  # drop our references to the tables as soon as the decoder holds them
    out = []
    for res in decoder.decode_texts(texts, tokenizer):
        d = res.to_dict()  # the decoder decides every level's status (keys gone: `undecodable`)
        d["levels"].extend(undecodable_level(lv, r) for lv, r in sorted(missing.items()))
        out.append(d)
    return out
