"""The one decode path: /v1/verify, decode jobs (in process and on Celery workers, CPU or CUDA) and `hero decode`.

Each caller hands `Runner.run` a `DecodeJob`: the loaded profile, the texts, the level already granted by
`Policy.grant` (verifier.auth.policy), alpha and the device; no key material. The runner takes the material of
levels 1..level from its `MaterialCache` (checked against the key epoch on every call), decodes with the
decoder prepared on it (one per device and alpha), lets the engine make every level verdict (missing and
unavailable versions included) and shapes each result as released. It decrypts nothing above the grant, so
least privilege holds, and spec or scoring changes are made here once.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from verifier.base.cancel import Deadline, running
from verifier.base.errors import InvalidInput, TooLarge
from verifier.base.workslots import Busy, WorkSlots, auto_slots
from verifier.engine.decoder import DEFAULT_ALPHA, DecodeError, Decoder, decode_texts, make_decoder, token_ids
from verifier.engine.expected import NotOneValue, expected_results
from verifier.engine.model_aware import TooManyTokens
from verifier.engine.payload import PayloadError, level_values, value_fields
from verifier.engine.profile import Profile, ProfileError, resolve_profile
from verifier.keys.cache import CachedMaterial, MaterialCache
from verifier.keys.decodable import VerificationMaterial
from verifier.keys.deployment import stored_profiles
from verifier.keys.errors import KeyStoreError
from verifier.keys.service import DbKeyStore
from verifier.lm import TokenizerCache
from verifier.verify.disclosure import bonferroni, shape
from verifier.verify.expect import CORRECTION

log = logging.getLogger("hero.verify")


class TextNotDecodable(InvalidInput):
    """The input cannot be decoded at all (empty text, ids outside the vocabulary): 422."""


def decode_material(
    material: VerificationMaterial, profile: Profile, texts: list[str], alpha: float, tokenizer, device: str = "cpu",
    decoder: Decoder | None = None, scorer=None,
) -> list[dict]:
    """The decode body: the engine given exactly the material fetched for the caller, its results passed
    through as plain dicts (`DecodeResult.to_dict()`), levels 1..n of the material only;
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


@dataclass(frozen=True)
class DecodeJob:
    profile: Profile
    texts: tuple[str, ...]
    level: int  # granted (Policy.grant): levels 1..level are decoded and released
    alpha: float
    device: str = "cpu"
    token_ids: list[list[int]] | None = field(default=None, compare=False)  # tokenized already (the job drain)
    # (level, value) pairs asked about (`expect`), each <= level: checked once, before the job is made
    # (verify.service.expected_levels); a level above the grant has no key here, so it could get no answer anyway
    expect: tuple[tuple[int, int], ...] = ()
    cancel: threading.Event | None = field(default=None, compare=False)  # set: stop (the caller left)
    slot_held: bool = field(default=False, compare=False)  # the caller holds a model-aware slot already (the API)

    def __repr__(self) -> str:  # texts may be sensitive: never log them
        return f"DecodeJob(profile={self.profile.name!r}, texts={len(self.texts)}, level={self.level})"


class Decoded(NamedTuple):
    results: list[dict]  # shaped as released, in input order
    handed: dict[int, list[str]]  # the key versions the decoder was handed, per level (never bytes)


class DecodeRunner(Protocol):
    alpha: float

    def decode(self, job: DecodeJob) -> list[dict]:
        """Released results (`Runner.run(job).results`); raises the service's domain errors."""
        ...

    def token_evidence(self, profile: Profile, text: str) -> tuple[dict, list[tuple[int, int, float]]]:
        """Level-1 result of one text and its per-token evidence (see `Runner.token_evidence`)."""
        ...

    def close(self) -> None: ...


class _Tokenized:
    """The tokenizer handed to the decoder for texts the caller has already tokenized."""

    def __init__(self, ids: list[list[int]]) -> None:
        self._ids = ids

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        if len(texts) != len(self._ids):
            raise RuntimeError("tokenized batch does not match the texts being decoded")
        return self._ids


def handed_summary(material: VerificationMaterial) -> dict[int, list[str]]:
    return {lv: sorted(t.version for t in ts) for lv, ts in material.tables.items()}


class Runner:
    """One per process (built by verifier.process). Material and decoders are kept per profile and level in a
    `MaterialCache`; a decoder for another device or alpha than the default is built once per cache entry."""

    def __init__(self, store: DbKeyStore, tokenizers: TokenizerCache, alpha: float = DEFAULT_ALPHA,
                 scorer=None, slots: WorkSlots | None = None) -> None:
        self.store = store
        # the process's bound on model-aware decodes (verifier/base/workslots.py): the API takes a slot before it
        # charges the caller; a job's drain takes one here
        self.slots = slots if slots is not None else WorkSlots(auto_slots(), 10.0)
        self.scorer = scorer  # model-aware scoring (HERO_MODEL_AWARE=1), None: model-free
        self.tokenizers = tokenizers
        self.alpha = alpha
        self._lock = threading.Lock()
        self._profiles: dict[str, Profile] = {}  # earlier profiles of the store, read once per process

        def prepare(profile: Profile, material: VerificationMaterial) -> Decoder | None:
            return make_decoder(profile, material.tables, alpha=self.alpha, unavailable=material.unavailable)

        self.cache = MaterialCache(store, prepare)

    def __repr__(self) -> str:
        return f"Runner({self.cache!r})"

    def _decoder(self, entry: CachedMaterial, profile: Profile, device: str, alpha: float) -> Decoder | None:
        if device == "cpu" and alpha == self.alpha:
            return entry.prepared
        with self._lock:
            key = (device, alpha)
            if key not in entry.variants:
                mat = entry.material
                entry.variants[key] = make_decoder(profile, mat.tables, alpha=alpha, unavailable=mat.unavailable,
                                                   device=device)
            return entry.variants[key]

    def run(self, job: DecodeJob) -> Decoded:
        """The one decode function: granted level in, released results (and what was handed) out.

        When the key store holds keys of profiles other than the served one (`job.profile`; a deployment moved
        with `hero profile use`), each text is decoded under the served profile and every earlier one (levels
        1..min(granted, its depth), key material of those levels only), at alpha / P for P profiles tried; every
        p-value is then multiplied by P (Bonferroni, capped at 1), so each verdict is the engine's on the corrected
        p-values, and the watermarked result whose corrected text p-value is smallest is released (ties, and a text
        no profile calls watermarked: the served profile's). Each result names its profile (`profile`)."""
        tried = self._tried(job)
        if len(tried) == 1:
            results, handed = self._run_one(job, tried[0][1])
            for r in results:
                r["profile"] = job.profile.name
            return Decoded(results, handed)
        n = len(tried)
        per_profile: list[list[dict]] = []
        handed: dict[int, list[str]] = {}
        for sub, entry in tried:
            results, got = self._run_one(replace(job, profile=sub.profile, level=sub.level, expect=sub.expect,
                                                 alpha=job.alpha / n, token_ids=sub.token_ids), entry)
            for r in results:
                correct(r, n)
                r["profile"] = sub.profile.name
                if sub.profile is not job.profile:
                    for e in r.get("expected") or ():  # the level of the asked fields in the served profile
                        e["level"] = next(iter(level_values(job.profile, e["fields"])))
            per_profile.append(results)
            for lv, versions in got.items():
                named = versions if sub.profile is job.profile else [f"{sub.profile.name}:{v}" for v in versions]
                handed.setdefault(lv, []).extend(named)
        return Decoded([_released(column) for column in zip(*per_profile, strict=True)], handed)

    def _tried(self, job: DecodeJob) -> list[tuple[DecodeJob, CachedMaterial]]:
        """The served profile's job and material, then each earlier profile of the store the grant covers (levels
        1..min(job.level, its depth)) with a usable level-1 version: its job (the `expect` asked in its fields;
        a profile without them is not tried) and material."""
        served = self.cache.get(job.profile, job.level)  # levels 1..job.level only
        tried = [(job, served)]
        for name in stored_profiles(self.store.db):
            if name == job.profile.name:
                continue
            try:
                profile = self._profile(name)
                level = min(job.level, profile.depth)
                asked = _translate_expect(job, profile, level)
                if asked is None:
                    continue
                entry = self.cache.get(profile, level)
            except (ProfileError, KeyStoreError, OSError) as exc:  # an earlier profile that cannot decode: skipped
                log.warning("earlier profile not tried", extra={"profile": name, "reason": str(exc)[:200]})
                continue
            if not entry.material.tables.get(1):
                continue  # no usable level-1 version (destroyed or disabled): nothing of it can match
            same = (profile.tokenizer, profile.tokenizer_revision) == (job.profile.tokenizer,
                                                                       job.profile.tokenizer_revision)
            tried.append((replace(job, profile=profile, level=level, expect=asked,
                                  token_ids=job.token_ids if same else None), entry))
        return tried

    def _profile(self, name: str) -> Profile:
        with self._lock:
            if name not in self._profiles:
                self._profiles[name] = resolve_profile(name)
            return self._profiles[name]

    def _run_one(self, job: DecodeJob, entry: CachedMaterial) -> tuple[list[dict], dict[int, list[str]]]:
        """One profile's decode: the results as released and the versions handed."""
        ids = job.token_ids
        if ids is None and job.expect:  # tokenized once for the decode and the one-value test
            ids = token_ids(self.tokenizers.for_profile(job.profile), list(job.texts))
        tokenizer = _Tokenized(ids) if ids is not None else self.tokenizers.for_profile(job.profile)
        decoder = self._decoder(entry, job.profile, job.device, job.alpha)
        if self.scorer is None:
            raw = decode_material(entry.material, job.profile, list(job.texts), job.alpha, tokenizer, job.device,
                                  decoder)
        else:  # model-aware: the LM's run stops at its deadline, the caller's cancel or the process's shutdown
            deadline = Deadline(self.scorer.deadline_s, job.cancel, "model-aware scoring",
                                "HERO_MODEL_AWARE_DEADLINE_SECONDS")
            with nullcontext() if job.slot_held else self.slots.hold(forever=True), running(deadline):
                try:
                    raw = decode_material(entry.material, job.profile, list(job.texts), job.alpha, tokenizer,
                                          job.device, decoder, scorer=self.scorer.bound(deadline))
                except MemoryError:  # never a 500: the host is short of memory now, not the request wrong
                    raise Busy("model-aware scoring ran out of memory; retry later", 30) from None
                except RuntimeError as exc:
                    if "alloc" not in str(exc).lower():  # torch's "DefaultCPUAllocator: can't allocate ..."
                        raise
                    raise Busy("model-aware scoring ran out of memory; retry later", 30) from None
        results = [shape(r, job.level) for r in raw]
        if job.expect:
            assert ids is not None
            self._expected(job, decoder, ids, results)
        return results, handed_summary(entry.material)

    def _expected(self, job: DecodeJob, decoder: Decoder | None, ids: list[list[int]], results: list[dict]) -> None:
        """Each result's `expected`: the one-value test of the asked values (engine/expected.py), model-free, with
        the decoder this job decoded with (None: no usable table), deeper levels under the level-1 version the
        text's decode named."""
        if decoder is None or any(lv not in decoder.tables for lv, _ in job.expect):
            for r in results:
                r["expected"] = []  # no usable key for the level: no test (its levels say why)
            return
        lv1 = [r["levels"][0]["key_version"] for r in results]
        try:
            answers = expected_results(decoder, ids, dict(job.expect), lv1, job.alpha,
                                       lambda lv, v: value_fields(job.profile, lv, v))
        except (NotOneValue, ValueError) as exc:
            raise TextNotDecodable(str(exc)) from None
        for r, a in zip(results, answers, strict=True):
            for e in a:  # one question so far; the service corrects for the values asked before (verify/expect.py)
                e["values_asked"], e["correction"] = 1, CORRECTION
            r["expected"] = a

    def decode(self, job: DecodeJob) -> list[dict]:
        return self.run(job).results

    def token_evidence(self, profile: Profile, text: str) -> tuple[dict, list[tuple[int, int, float]]]:
        """Level-1 decode of one text and, when its value is released, each scored token's evidence for it as
        (character start, character end, score). Level-1 material only, whatever the caller's role."""
        entry = self.cache.get(profile, 1)
        tokenizer = self.tokenizers.for_profile(profile)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        decoder = entry.prepared  # the cache prepares one for every entry (None: no usable level-1 version)
        if decoder is None:
            raise TextNotDecodable("no usable level-1 key version: " + (
                entry.material.missing.get(1) or entry.material.unavailable.get(1) or "none is active"))
        try:
            result, evidence = decoder.token_evidence(enc["input_ids"])
        except DecodeError as exc:
            raise TextNotDecodable(str(exc).splitlines()[0] if str(exc) else "text cannot be decoded") from None
        offsets = enc["offset_mapping"]
        return result.to_dict(), [(int(offsets[p][0]), int(offsets[p][1]), score) for p, score in evidence]

    def close(self) -> None:
        self.cache.clear()  # decrypted material does not outlive the process
        self.tokenizers.clear()


def _released(column: tuple[dict, ...]) -> dict:
    """Of one text's results (served profile first), the one released: the watermarked result with the smallest
    corrected text p-value (ties: the earlier in the list, so the served profile); the served profile's when no
    profile calls the text watermarked (nothing matched: no earlier profile is named on an unmarked text)."""
    marked = [r for r in column if r["watermarked"]]
    return min(marked, key=lambda r: r["p_value"]) if marked else column[0]


def correct(result: dict, n: int) -> None:
    """Bonferroni over `n` profiles tried, in place: every p-value of the result (text, levels, candidates,
    `expected`) times n, capped at 1 (the verdicts were made at alpha / n: the same verdicts on these values)."""
    levels = result.get("levels", [])
    for entry in (result, *levels, *(c for lv in levels for c in lv.get("candidates") or []),
                  *(result.get("expected") or [])):
        bonferroni(entry, n)


def _translate_expect(job: DecodeJob, profile: Profile, level: int) -> tuple[tuple[int, int], ...] | None:
    """The job's `expect` (levels and values of the served profile) in `profile`'s levels, by field name; None
    when `profile` cannot answer it (another field set, a segmented level, a level above `level`)."""
    if not job.expect:
        return ()
    fields: dict[str, int] = {}
    for lv, value in job.expect:
        fields.update(value_fields(job.profile, lv, value))
    try:
        asked = level_values(profile, fields)
    except PayloadError:
        return None
    if any(lv > level or not profile.levels[lv - 1].per_value for lv in asked):
        return None
    return tuple(sorted(asked.items()))
