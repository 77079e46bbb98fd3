"""Method registry: name -> generation and decoding adapters with one interface for HeRo and baselines.

Every method carries a `total_bits` payload given as a flat bit list (MSB first). For HeRo the list is
level 1's bits, then level 2's, ...; level 1 is public, deeper levels are private. Keys are derived
deterministically from the run seed (so a cached run can be resumed and re-decoded), never from
`new_master_secret()`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from hero_eval.baselines import MPAC, BiMark
from verifier.engine.decoder import Decoder
from verifier.engine.keys import KeySet, KeyTable, derive_table
from verifier.engine.profile import Profile, make_profile
from verifier.provider.generation import HeroLogitsProcessor

VOCAB = 49152

# Schedules: HeRo^2 uses the engine default K_1 = 20; deeper profiles need explicit small deeper chunks
# so that the schedule product stays below the vocabulary.
HERO_SPECS: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "HeRo1(2)": ((2,), None),
    "HeRo1(3)": ((3,), None),
    "HeRo2(1,1)": ((1, 1), (20,)),
    "HeRo2(2,1)": ((2, 1), (20,)),
    "HeRo2(2,2)": ((2, 2), (20,)),
    "HeRo4(2,2,2,2)": ((2, 2, 2, 2), (20, 4, 4)),
    "HeRo8(1,1,1,1,1,1,1,1)": ((1,) * 8, (20, 2, 2, 2, 2, 2, 2)),
}
BASELINES = ("MPAC(1)", "MPAC(2)", "BiMark(20)")
UNWATERMARKED = "unwatermarked"
ALL_METHODS = (*HERO_SPECS, *BASELINES, UNWATERMARKED)


def master(seed: int, name: str, level: int, salt: str = "") -> bytes:
    return hashlib.sha256(f"hero-eval/{seed}/{name}/{level}/{salt}".encode()).digest()


@dataclass
class Decoded:
    bits: list[int | None]  # aligned with the truth bits; None = undecoded
    score: float  # detection score, larger = more watermark-like (threshold set on human text)


@dataclass
class Method:
    name: str
    total_bits: int
    level_of_bit: list[int] = field(default_factory=list)  # 1 = public; >1 private (HeRo only)

    def supports(self) -> bool:
        return True

    # HeRo draws the token itself, so it must see the sampling warpers; the others let `generate` apply them.
    applies_warpers = False

    def processor(
        self, payloads: Sequence[Sequence[int]], seed: int, warpers: LogitsProcessorList | None = None
    ) -> LogitsProcessor | None:
        raise NotImplementedError

    def decode(self, ids: list[list[int]]) -> list[Decoded]:
        raise NotImplementedError


def _bits_to_int(bits: Sequence[int]) -> int:
    v = 0
    for b in bits:
        v = (v << 1) | int(b)
    return v


def _int_to_bits(v: int | None, n: int) -> list[int | None]:
    if v is None:
        return [None] * n
    return [(v >> (n - 1 - i)) & 1 for i in range(n)]


class HeroMethod(Method):
    applies_warpers = True

    def __init__(self, name: str, bits: tuple[int, ...], total_bits: int, schedule, seed: int, context_width: int = 4):
        profile = make_profile(bits, total_bits, VOCAB, schedule=schedule, context_width=context_width)
        self._setup(name, profile, seed)

    @classmethod
    def from_profile(cls, name: str, profile: Profile, seed: int) -> HeroMethod:
        """A method for a given (e.g. the product's default) profile, keys derived from the run seed."""
        m = cls.__new__(cls)
        m._setup(name, profile, seed)
        return m

    def _setup(self, name: str, profile: Profile, seed: int) -> None:
        self.profile = profile
        lob = [lv for lv in range(1, profile.depth + 1) for _ in range(profile.level_payload_bits(lv))]
        super().__init__(name, profile.total_bits, lob)
        self.keyset = KeySet(
            tuple(_level_table(master(seed, name, lv), profile, lv) for lv in range(1, profile.depth + 1))
        )
        self._decoder = Decoder(profile, {t.level: [t] for t in self.keyset.tables})

    def fields(self, bits: Sequence[int]) -> dict[str, int]:
        """Flat payload bits (level 1's fields first, each field MSB first) -> named field values."""
        out, pos = {}, 0
        for lvl in self.profile.levels:
            for f in lvl.fields:
                out[f.name] = _bits_to_int(bits[pos : pos + f.bits])
                pos += f.bits
        return out

    def processor(self, payloads, seed, warpers=None):
        g = torch.Generator().manual_seed(seed)
        return HeroLogitsProcessor(
            self.profile, self.keyset, [self.fields(p) for p in payloads], warpers or LogitsProcessorList(), generator=g
        )

    def _decoded_bits(self, result, levels: range) -> list[int | None]:
        out: list[int | None] = []
        for lv in levels:
            lr = result.levels[lv - 1]  # the paper's metric: argmax bits, whether or not they would be released
            out.extend(_int_to_bits(lr.most_likely, self.profile.level_payload_bits(lv)))
        return out

    def decode(self, ids):
        results = _decode_safe(self._decoder, ids)
        out = []
        for r in results:
            if r is None:
                out.append(Decoded([None] * self.total_bits, 0.0))
            else:
                out.append(Decoded(self._decoded_bits(r, range(1, self.profile.depth + 1)), -r.log10_p_value))
        return out


class ModelAwareMethod:
    """A HeRo method's texts and keys decoded model-aware (spec section 16): the LM re-run over each text
    weighs its evidence (`scoring: "model-aware"`). It generates nothing of its own: `base` makes the texts,
    so model-free and model-aware figures are measured on the same texts."""

    SUFFIX = " (model-aware)"

    def __init__(self, base: HeroMethod, model, batch_size: int = 16, store: Path | None = None) -> None:
        from verifier.engine.weighted_decode import DEFAULT_STATISTIC, WeightedDecoder, Weighting

        self.base, self.model, self.batch_size = base, model, batch_size
        self.store = store  # LM passes kept on disk (.npz per text), so a rerun or a second process re-uses them
        self.name = base.name + self.SUFFIX
        self.profile, self.keyset, self.total_bits = base.profile, base.keyset, base.total_bits
        self._weighting = Weighting(DEFAULT_STATISTIC)
        self._weighted = WeightedDecoder(base._decoder, statistic=self._weighting.statistic)
        self._memo: dict[tuple[int, ...], list[tuple[list[int], object]]] = {}
        if store is not None:
            store.mkdir(parents=True, exist_ok=True)
            for f in sorted(store.glob("*.npz")):
                try:
                    with np.load(f) as z:
                        ids, probs = z["ids"].tolist(), z["probs"]
                except (OSError, ValueError, KeyError):
                    continue  # a torn file from a killed run: computed again
                self._memo.setdefault(tuple(ids[:8]), []).append((ids, probs))

    def decode_ids(self, ids: list[list[int]], remember: bool = True):
        """`Decoder.decode_ids`, model-aware (the weights are the text's own; see engine/model_aware.py).
        `remember=False` runs the LM on every text (what a verifier pays: decode-cost measurements)."""
        probs = self.level_probabilities(ids, remember)
        h = self.profile.context_width
        return self._weighted.decode_ids(ids, [self._weighting.for_text(p, x, h) for p, x in zip(probs, ids,
                                                                                                 strict=True)])

    def level_probabilities(self, ids: list[list[int]], remember: bool = True) -> list:
        """engine/model_aware.level_probabilities, remembered per text: the LM is causal, so a text that is a
        prefix of one already scored (the 25/50/100-token prefixes of a 200-token text) reads its rows from
        the longer text's (scored positions are first occurrences, so the prefix's are the leading ones).
        One forward pass of SmolLM2 over 200 tokens costs about a CPU-second; the evaluation decodes each
        text at four lengths."""
        from verifier.engine.model_aware import level_probabilities
        from verifier.engine.reference import scored_positions

        out: list = [None] * len(ids)
        todo = []
        for i, x in enumerate(ids):
            for full, probs in self._memo.get(tuple(x[:8]), ()) if remember else ():
                if len(full) >= len(x) and full[: len(x)] == x:
                    out[i] = probs[: len(scored_positions(list(x), self.profile.context_width))]
                    break
            else:
                todo.append(i)
        todo.sort(key=lambda i: -len(ids[i]))  # longest first: later, shorter rows may reuse them
        new = level_probabilities(self.model, self.profile, [ids[i] for i in todo], batch_size=self.batch_size)
        for i, probs in zip(todo, new, strict=True):
            out[i] = probs
            if remember:
                self._memo.setdefault(tuple(ids[i][:8]), []).append((list(ids[i]), probs))
                if self.store is not None:
                    name = hashlib.sha256(np.asarray(ids[i], dtype=np.int64).tobytes()).hexdigest()[:24]
                    tmp = self.store / f".{name}.tmp.npz"
                    np.savez(tmp, ids=np.asarray(ids[i], dtype=np.int64), probs=probs)
                    tmp.replace(self.store / f"{name}.npz")
        return out


class SynthIDMethod(Method):
    """SynthID-Text (transformers' processor; baselines/synthid.py): a zero-bit watermark, detection only.

    `decode` scores with the binomial test; `Decoded.score` is -log10 p. `salt` derives another key set (the
    wrong-key calibration)."""

    applies_warpers = True  # it must run after temperature / top-k / top-p, as `generate` would run it

    def __init__(self, name: str, seed: int, salt: str = "", eos_token_id: int | None = None) -> None:
        from hero_eval.baselines.synthid import synthid_keys

        super().__init__(name, 0, [])
        self.keys = synthid_keys(seed, salt)
        self.eos_token_id = eos_token_id
        self._detector = None

    def processor(self, payloads, seed, warpers=None):
        from hero_eval.baselines.synthid import processor_for

        return processor_for(self.keys, warpers)

    @property
    def detector(self):
        from hero_eval.baselines.synthid import SynthIDDetector

        if self._detector is None:
            self._detector = SynthIDDetector(self.keys, self.eos_token_id)
        return self._detector

    def decode(self, ids):
        return [Decoded([], -s.log10_p) for s in self.detector.score(ids)]


def _level_table(secret: bytes, profile: Profile, level: int) -> KeyTable:
    """Level `level`'s key table as the profile's spec version derives it (v2: one key per whole value
    on per-value levels); engines without spec v2 derive the v1 table."""
    from verifier.engine import keys

    if hasattr(keys, "derive_level_table"):
        return keys.derive_level_table(secret, profile, level, f"l{level}")
    return derive_table(secret, level, profile.levels[level - 1].bits, f"l{level}")


def _decode_safe(decoder, ids: list[list[int]]):
    """decoder.decode_ids (a Decoder or a ModelAwareMethod) on the non-trivial rows (None for rows with fewer
    tokens than the context)."""
    keep = [i for i, row in enumerate(ids) if len(row) > decoder.profile.context_width]
    res = decoder.decode_ids([ids[i] for i in keep]) if keep else []
    out: list = [None] * len(ids)
    for i, r in zip(keep, res, strict=True):
        out[i] = r
    return out


class BaselineMethod(Method):
    def __init__(self, name: str, total_bits: int, factory: Callable[[int], MPAC | BiMark]):
        super().__init__(name, total_bits, [1] * total_bits)
        self.scheme = factory(total_bits)

    def processor(self, payloads, seed, warpers=None):
        return self.scheme.processor([list(p) for p in payloads])

    def decode(self, ids):
        d = self.scheme.decode_ids(ids)
        return [Decoded(b, s) for b, s in zip(d.bits, d.score, strict=True)]


class Unwatermarked(Method):
    def processor(self, payloads, seed, warpers=None):
        return None

    def decode(self, ids):
        return [Decoded([], 0.0) for _ in ids]


def build_method(
    name: str, total_bits: int, seed: int, schedule: tuple[int, ...] | None = None, context_width: int = 4
) -> Method | None:
    """The method at a payload size, or None if that size does not fit it (e.g. 12 bits for HeRo^8).

    A non-default K_1 or context width is part of the label (and so of the keys and the cache file)."""
    if name in HERO_SPECS:
        bits, default_sched = HERO_SPECS[name]
        if total_bits % sum(bits):
            return None
        label = name if schedule is None else f"{name}[K1={schedule[0]}]"
        if context_width != 4:
            label += f"[h={context_width}]"
        return HeroMethod(label, bits, total_bits, schedule or default_sched, seed, context_width)
    key = master(seed, name, 0)
    if name.startswith("MPAC("):
        b = int(name[5:-1])
        if total_bits % b:
            return None
        return BaselineMethod(name, total_bits, lambda n: MPAC(key, n, bits_per_pos=b, delta=2.0, vocab_size=VOCAB))
    if name.startswith("BiMark("):
        d = int(name[7:-1])
        return BaselineMethod(name, total_bits, lambda n: BiMark(key, n, layers=d, delta=1.0, vocab_size=VOCAB))
    if name == UNWATERMARKED:
        return Unwatermarked(name, total_bits, [])
    raise ValueError(f"unknown method {name!r}; choose from {list(ALL_METHODS)}")
