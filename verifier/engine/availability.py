"""Decoding when key versions are gone (destroyed or disabled), and the level verdicts that follow.

The decoder scores the versions it is handed and, told which versions are gone (`unavailable`), makes
those verdicts itself (engine/decoder.py): a level some of whose versions are gone and that shows no
evidence is `undecodable` with the reason, and so is every level above an undecodable level 1 (they
hang on level 1's position key). Here, in the engine too, so that service code only passes results
through: a level with no usable version at all, and every level above it, is `undecodable` with its
reason.
Disabled versions (`not_tried`) are not a loss: a level without evidence under the versions tried keeps
its verdict (a human text stays not watermarked) and its reason names the versions not tried.

An undecodable level releases no field value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from verifier.engine.decoder import Decoder, DecodeResult, LevelResult
from verifier.engine.keys import KeyTable
from verifier.engine.profile import Profile


def decode_texts(
    profile: Profile,
    tables: Mapping[int, Sequence[KeyTable]],
    texts: Sequence[str],
    tokenizer,
    *,
    alpha: float,
    unavailable: Mapping[int, str],
    missing: Mapping[int, str],
    not_tried: Mapping[int, str] | None = None,
    device: str | torch.device = "cpu",
    decoder: Decoder | None = None,
    scorer=None,
) -> list[DecodeResult]:
    """Decode `texts` with the usable `tables`; `unavailable` / `missing`: level -> why versions are gone;
    `not_tried`: level -> the disabled versions the decoder was not handed. `decoder`: one built earlier for
    exactly these tables (`make_decoder`), so a server does not expand the key words per request. `scorer`:
    model-aware scoring (verifier.engine.model_aware.ModelAwareScorer: `decode_texts(decoder, texts, tokenizer)`),
    None for the model-free default."""
    if not tables:
        return [
            DecodeResult(False, 1.0, 0.0, None, 0, _missing_levels(missing), spec_version=profile.spec_version)
            for _ in texts
        ]
    decoder = decoder or make_decoder(profile, tables, alpha=alpha, unavailable=unavailable, device=device)
    results = scorer.decode_texts(decoder, texts, tokenizer) if scorer else decoder.decode_texts(texts, tokenizer)
    return [_with_verdicts(r, alpha, missing, not_tried or {}) for r in results]


def make_decoder(
    profile: Profile,
    tables: Mapping[int, Sequence[KeyTable]],
    *,
    alpha: float,
    unavailable: Mapping[int, str],
    device: str | torch.device = "cpu",
) -> Decoder | None:
    """The decoder `decode_texts` would build (None when no table is usable)."""
    if not tables:
        return None
    return Decoder(profile, tables, alpha=alpha, unavailable=unavailable, device=device)


def _missing_levels(missing: Mapping[int, str]) -> list[LevelResult]:
    return [
        LevelResult(
            level=level, key_version=None, fields=None, confidence=0.0, p_value=1.0,
            log10_p_value=0.0, bit_confidence=[], segment_tokens=[], undecoded_segments=[], versions_tried=0,
            status="undecodable", reason=reason,
        )
        for level, reason in sorted(missing.items())
    ]


def _with_verdicts(
    result: DecodeResult, alpha: float, missing: Mapping[int, str], not_tried: Mapping[int, str]
) -> DecodeResult:
    """The decoder already made the verdicts for versions it was told are gone (`unavailable`); add the
    levels with no usable version at all, and name the disabled versions not tried where nothing was found."""
    for lv in result.levels:
        why = not_tried.get(lv.level)
        if why and lv.p_value > alpha:
            lv.reason = f"{lv.reason}; {why}" if lv.reason else why
    result.levels.extend(_missing_levels(missing))
    for lv in result.levels:
        if lv.status == "undecodable" and lv.fields is not None:
            lv.fields = dict.fromkeys(lv.fields)
    return result
