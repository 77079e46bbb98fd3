"""An in-process detector for a provider to self-test its watermark, shaped like transformers' `WatermarkDetector`
(`HeroWatermarkDetector(...)(input_ids) -> HeroWatermarkDetectorOutput` with `prediction`, `p_value`,
`num_tokens_scored`), built on the engine's `Decoder` (verifier/engine/decoder.py): no service, no database, no
model library. It reads only the key tables it is given: a provider's bundle holds every level's (the public
fields and the private ones decode); tables for level 1 only (or `levels=1`) decode the public fields only, as a
moderator would. Every spec version, v5 included. Pass the generated continuation only (the prompt is not
watermarked and dilutes the evidence).

A self-test with a synthetic key set (a provider passes its opened bundle, `GenerationBundle` or `BundleKeys`,
instead): 200 tokens drawn by the product's one generation step from random logits, and 200 random ids.

>>> import torch
>>> from verifier.engine.fused import make_fused_sampler
>>> from verifier.engine.keys import KeySet, derive_level_table
>>> from verifier.engine.payload import encode_payload
>>> from verifier.engine.profile import v5_profile
>>> profile = v5_profile()
>>> keys = KeySet(tuple(derive_level_table(bytes([lv]) * 32, profile, lv, f"l{lv}-v1") for lv in (1, 2)))
>>> sampler, g = make_fused_sampler(profile, keys), torch.Generator().manual_seed(0)
>>> payload = torch.tensor([encode_payload(profile, {"model": 3, "user": 1234})])
>>> ids = torch.randint(0, profile.vocab_size, (1, 3), generator=g)  # the prompt's last 3 ids (context_width)
>>> generated, log = torch.zeros(1, dtype=torch.long), sampler.new_log(1, capacity=201)
>>> for _ in range(200):
...     tok = sampler.step(torch.randn(1, profile.vocab_size, generator=g) * 2, ids[:, -3:], payload, generated, log, g)
...     ids = torch.cat([ids, tok[:, None]], dim=1)
>>> batch = torch.cat([ids[:, 3:], torch.randint(0, profile.vocab_size, (1, 200), generator=g)])  # [2, 200]

>>> detector = HeroWatermarkDetector(keys, profile)
>>> detector
HeroWatermarkDetector(profile='v5', spec_version=5, levels=2, versions={1: ['l1-v1'], 2: ['l2-v1']}, alpha=0.0001)
>>> out = detector(batch)
>>> out.prediction
array([ True, False])
>>> out.fields
[{'model': 3, 'user': 1234}, {'model': None, 'user': None}]
>>> bool(out.p_value[0] < 1e-10), bool(out.p_value[1] > 1e-3), out.num_tokens_scored.dtype.name
(True, True, 'int64')

The public level only (what a moderator holds): the private `user` is neither decoded nor shown.

>>> HeroWatermarkDetector(keys, profile, levels=1)(batch[:1]).fields
[{'model': 3}]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import torch

from verifier.engine.decoder import DEFAULT_ALPHA, Decoder, DecodeResult, token_ids
from verifier.engine.keys import KeySet, KeyTable
from verifier.engine.profile import Profile, resolve_profile, v5_profile

__all__ = ["HeroWatermarkDetector", "HeroWatermarkDetectorOutput"]


@dataclass(frozen=True, eq=False)
class HeroWatermarkDetectorOutput:
    """Outputs of `HeroWatermarkDetector`, one entry per text of the batch (B texts).

    prediction (np.ndarray of bool, shape (B,)): the text carries the mark (its p-value below the detector's alpha).
    p_value (np.ndarray of float64, shape (B,)): the text's p-value (the engine's, corrected for the levels, values
        and key versions searched); log10_p_value: its log10, exact where p_value underflows to 0.
    num_tokens_scored (np.ndarray of int64, shape (B,)): tokens the decode scored (repeated contexts are not).
    fields (list of dict): per text, every field of the levels held -> its decoded value, None where that level
        released none (absent, detected without a value, mixed); levels not held have no entry.
    levels (list of list of dict): per text, one result per level held, as the service releases them
        (`LevelResult.to_dict`: status, p_value, key_version, confidence, ...).
    """

    prediction: np.ndarray
    p_value: np.ndarray
    log10_p_value: np.ndarray
    num_tokens_scored: np.ndarray
    fields: list[dict[str, int | None]]
    levels: list[list[dict[str, Any]]]

    @classmethod
    def from_results(cls, results: Sequence[DecodeResult]) -> HeroWatermarkDetectorOutput:
        fields = [{k: v for lv in r.levels for k, v in (lv.fields or {}).items()} for r in results]
        return cls(
            prediction=np.array([r.watermarked for r in results], dtype=bool),
            p_value=np.array([r.p_value for r in results], dtype=np.float64),
            log10_p_value=np.array([r.log10_p_value for r in results], dtype=np.float64),
            num_tokens_scored=np.array([r.tokens_scored for r in results], dtype=np.int64),
            fields=fields,
            levels=[[lv.to_dict() for lv in r.levels] for r in results],
        )


KeySource = Any  # GenerationBundle | BundleKeys | KeySet | KeyTable | Mapping[int, KeyTable | Sequence[KeyTable]]


class HeroWatermarkDetector:
    """Decodes token ids with a provider's own key tables and answers as transformers' `WatermarkDetector`.

    Args:
        keys: the key tables: an opened bundle (`GenerationBundle`, or `BundleKeys`: its bundle in force), a
            `KeySet`, a `{level: KeyTable or [KeyTable, ...]}` mapping, or a list of these (several key versions of
            a level, e.g. the bundle before a rotation and the one after: each text is decoded at its best version,
            Bonferroni-corrected). Levels must be 1..n without gaps; deeper levels' fields stay undecoded.
        profile: a `Profile` or a profile name / path (`resolve_profile`); default the bundle's, and for bare
            tables spec v5's shipped profile (policies/profiles/v5.yaml, what a new deployment serves).
        levels: decode levels 1..`levels` only (1: the public fields, a moderator's view); default every level held.
        alpha: the significance level of `prediction` and of each level's status (the service's default 1e-4).
        device: where the decode runs ("cpu", "cuda").
        tokenizer: for texts (`detector(["..."])`): the profile's tokenizer (verifier.lm's or any HF tokenizer).

    The detector holds key tables: it never shows them (repr names versions only) and is never pickled.
    """

    def __init__(self, keys: KeySource | Sequence[KeySource], profile: Profile | str | None = None, *,
                 levels: int | None = None, alpha: float = DEFAULT_ALPHA, device: str | torch.device = "cpu",
                 tokenizer: Any = None) -> None:
        tables, bundle_profiles = _tables(keys)
        if isinstance(profile, str):
            profile = resolve_profile(profile)
        for bp in bundle_profiles:
            if profile is None:
                profile = bp
            elif bp != profile:
                raise ValueError(f"the bundle's profile {bp.name!r} is not the profile given ({profile.name!r}): "
                                 "a bundle's tables decode under its own profile")
        profile = profile if profile is not None else v5_profile()
        if levels is not None:
            if not 1 <= levels <= max(tables, default=0):
                raise ValueError(f"levels must be 1..{max(tables, default=0)} (the levels whose tables are held)")
            tables = {lv: ts for lv, ts in tables.items() if lv <= levels}
        self.profile = profile
        self.alpha = alpha
        self.tokenizer = tokenizer
        self._decoder = Decoder(profile, tables, alpha=alpha, device=device)  # DecodeError: tables do not fit

    @property
    def levels(self) -> int:
        """The deepest level decoded (its fields and those of every level above it are released)."""
        return max(self._decoder.tables)

    @property
    def key_versions(self) -> dict[int, list[str]]:
        return {lv: [t.version for t in ts] for lv, ts in sorted(self._decoder.tables.items())}

    def __repr__(self) -> str:  # never the key bytes
        return (f"HeroWatermarkDetector(profile={self.profile.name!r}, spec_version={self.profile.spec_version}, "
                f"levels={self.levels}, versions={self.key_versions}, alpha={self.alpha})")

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("HeroWatermarkDetector holds key tables and cannot be pickled or copied")

    def __call__(self, input_ids: Any, *, tokenizer: Any = None,
                 pad_token_id: int | None = None) -> HeroWatermarkDetectorOutput:
        """Detect the mark in a batch.

        input_ids: token ids [B, T] (torch or numpy; a 1-D [T] is one text), a list of id lists (ragged), or
            texts (a string or a list of them; needs `tokenizer` here or at construction). The generated
            continuation only: the prompt carries no mark.
        pad_token_id: ids equal to it at either end of a row are dropped (a padded batch from `model.generate`).
        """
        rows = self._rows(input_ids, tokenizer or self.tokenizer)
        if pad_token_id is not None:
            rows = [_strip(r, pad_token_id) for r in rows]
        return HeroWatermarkDetectorOutput.from_results(self._decoder.decode_ids(rows))

    def _rows(self, input_ids: Any, tokenizer: Any) -> list[list[int]]:
        if isinstance(input_ids, str):
            input_ids = [input_ids]
        if isinstance(input_ids, torch.Tensor | np.ndarray):
            if input_ids.ndim not in (1, 2):
                raise ValueError(f"input_ids must be [B, T] or [T], got {tuple(input_ids.shape)}")
            if input_ids.dtype.is_floating_point if isinstance(input_ids, torch.Tensor) else \
                    not np.issubdtype(input_ids.dtype, np.integer):
                raise TypeError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
            arr = input_ids.detach().cpu().tolist() if isinstance(input_ids, torch.Tensor) else input_ids.tolist()
            return [arr] if input_ids.ndim == 1 else arr
        rows = list(input_ids)
        if rows and all(isinstance(r, str) for r in rows):
            if tokenizer is None:
                raise ValueError("texts need a tokenizer (HeroWatermarkDetector(..., tokenizer=) or tokenizer=)")
            for i, t in enumerate(rows):
                if not t.strip():
                    raise ValueError(f"text {i} is empty")
            return [list(r) for r in token_ids(tokenizer, rows)]
        if rows and all(isinstance(r, int | np.integer) for r in rows):
            return [[int(x) for x in rows]]
        return [[int(x) for x in r] for r in rows]


def _strip(row: list[int], pad: int) -> list[int]:
    start, end = 0, len(row)
    while start < end and row[start] == pad:
        start += 1
    while end > start and row[end - 1] == pad:
        end -= 1
    return row[start:end]


def _tables(keys: Any) -> tuple[dict[int, list[KeyTable]], list[Profile]]:
    """{level: [tables, one per distinct version]} and the profiles of the bundles among `keys`."""
    out: dict[int, list[KeyTable]] = {}
    profiles: list[Profile] = []

    def add(t: KeyTable) -> None:
        if not isinstance(t, KeyTable):
            raise TypeError(f"not a key table: {type(t).__name__}")
        have = out.setdefault(t.level, [])
        if all(x.version != t.version for x in have):
            have.append(t)

    def visit(k: Any) -> None:
        bundle = k.bundle() if callable(getattr(k, "bundle", None)) else k  # BundleKeys: the bundle in force
        if bundle is None:
            raise ValueError("no bundle: the BundleKeys holds none yet")
        if hasattr(bundle, "keyset") and hasattr(bundle, "profile"):  # GenerationBundle
            profiles.append(bundle.profile)
            bundle = bundle.keyset
        if isinstance(bundle, KeySet):
            for t in bundle.tables:
                add(t)
        elif isinstance(bundle, KeyTable):
            add(bundle)
        elif isinstance(bundle, Mapping):
            for lv, ts in bundle.items():
                for t in [ts] if isinstance(ts, KeyTable) else ts:
                    if t.level != lv:
                        raise ValueError(f"key table of level {t.level} given as level {lv}")
                    add(t)
        elif isinstance(bundle, Iterable) and not isinstance(bundle, str | bytes):
            for x in bundle:
                visit(x)
        else:
            raise TypeError(f"keys must be a bundle, a KeySet or key tables, got {type(k).__name__}")

    visit(keys)
    return out, profiles
