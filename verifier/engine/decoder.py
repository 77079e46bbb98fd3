"""HeRo decoder: token ids (or text) -> per level a status, the supported value, calibrated p-values.

Only the key tables handed in are used, so a caller holding level-1 tables learns nothing about
level 2 (its evidence is never computed). Each level may come with several key versions (rotation);
the best-matching version is reported with its p-value Bonferroni-corrected for the versions tried.
What a level and a text are called, and which value is released, is decided in engine/verdicts.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from gpu import prf
from gpu.evidence import segment_scores
from gpu.regions import region_tops
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine import multiplexed, reference, stats
from verifier.engine.attribution import Attribution, decide_tops, whole_text_log_p
from verifier.engine.keys import KeyTable
from verifier.engine.payload import value_fields
from verifier.engine.profile import Profile
from verifier.engine.verdicts import (
    DecodeResult,
    LevelResult,
    hang_on_level1,
    held_verdict,
    missing_levels,
    text_flags,
    text_verdict,
    with_availability,
)

DEFAULT_ALPHA = 1e-4


class DecodeError(ValueError):
    """The input cannot be decoded at all (no keys, empty text, ids outside the vocabulary)."""


def _log10(log_p: float) -> float:
    return log_p / math.log(10.0)


# `inconsistent-levels` needs a deeper level far from significant on a text long enough to expect its evidence:
# a genuine top-k/top-p text whose level 2 is merely short of alpha (p = 1e-3, say) is normal, not a warning.
def token_ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The ids a decoder scores: no special tokens added. verifier.lm's tokenizers offer the faster batch call
    (same ids); any HF tokenizer works too."""
    encode = getattr(tokenizer, "encode_ids", None)
    return encode(list(texts)) if encode else tokenizer(list(texts), add_special_tokens=False)["input_ids"]


class Decoder:
    """Decodes a batch for exactly the levels whose tables it is given."""

    def __init__(
        self,
        profile: Profile,
        tables: Mapping[int, Sequence[KeyTable]],
        *,
        alpha: float = DEFAULT_ALPHA,
        device: str | torch.device = "cpu",
        unavailable: Mapping[int, str] | None = None,
    ) -> None:
        if not tables or 1 not in tables or not tables[1]:
            raise DecodeError("no level-1 key tables: nothing can be decoded")
        levels = sorted(tables)
        if levels != list(range(1, len(levels) + 1)):
            raise DecodeError(f"key tables must cover levels 1..n without gaps, got {levels}")
        if levels[-1] > profile.depth:
            raise DecodeError(f"profile {profile.name!r} has {profile.depth} levels, got tables for {levels[-1]}")
        for lv, ts in tables.items():
            want = 1 << profile.levels[lv - 1].key_bits
            if any(len(t.entries) != want for t in ts):
                raise DecodeError(f"level {lv} key tables must hold {want} keys under profile {profile.name!r}")
        self.profile = profile
        self.tables = {lv: list(ts) for lv, ts in tables.items()}
        self.alpha = alpha
        self.device = torch.device(device)
        self.unavailable = dict(unavailable or {})
        self._words = {
            (lv, t.version): prf.key_words(list(t.entries), self.device) for lv, ts in self.tables.items() for t in ts
        }
        # spec v4: a level with issued values is searched over those only (their rows of the key words)
        self._issued = {lv: torch.tensor(profile.levels[lv - 1].issued, dtype=torch.int64, device=self.device)
                        for lv in self.tables if profile.levels[lv - 1].issued is not None}
        self._searched_words = {
            (lv, v): (k0[self._issued[lv]], k1[self._issued[lv]]) if lv in self._issued else (k0, k1)
            for (lv, v), (k0, k1) in self._words.items()
        }
        self._seed_words = {  # spec v3 level keys (one seed per token and level)
            (lv, t.version): prf.key_words([t.level_key], self.device)
            for lv, ts in self.tables.items() for t in ts if t.level_key is not None
        }

    # -- inputs -----------------------------------------------------------------------------
    def pad(self, batch: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ids [B, width] and lengths [B]; every id checked against the vocabulary."""
        lengths = np.fromiter((len(x) for x in batch), dtype=np.int64, count=len(batch))
        width = max(1, int(lengths.max()) if len(batch) else 1)
        flat = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int64, count=int(lengths.sum()))
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.profile.vocab_size):
            bad = (flat < 0) | (flat >= self.profile.vocab_size)
            i = int(np.searchsorted(np.cumsum(lengths), int(bad.argmax()), side="right"))
            raise DecodeError(f"text {i}: token ids outside the profile vocabulary")
        ids = np.zeros((len(batch), width), dtype=np.int64)
        ids[np.arange(width) < lengths[:, None]] = flat
        t_ids, t_len = torch.from_numpy(ids), torch.from_numpy(lengths)
        if self.device.type == "cuda":  # pinned host buffers: the copies run asynchronously, in stream order
            return t_ids.pin_memory().to(self.device, non_blocking=True), t_len.pin_memory().to(self.device,
                                                                                              non_blocking=True)
        return t_ids, t_len

    def decode_texts(self, texts: Sequence[str], tokenizer) -> list[DecodeResult]:
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise DecodeError(f"text {i} is empty")
        return self.decode_ids(token_ids(tokenizer, texts))

    # -- decoding ---------------------------------------------------------------------------
    def _scores(self, ids, lengths, pos_version: str, level_tables: list[tuple[int, KeyTable]]):
        """Window scores [B, W, cells, C] per table and counts [B, W, K] under one position key, left on the
        decoder's device (gpu/regions.py reduces them there)."""
        pk = prf.key_words([self._position_key(pos_version)], self.device)
        prof = self.profile
        lk = [self._level_keys(lv, t.version) for lv, t in level_tables]
        spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride,
                           prof.windows)
        return segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), lk)

    def _level_keys(self, lv: int, version: str, every_value: bool = False) -> LevelKeys:
        """The keys a decode searches: a spec v4 level's issued values only (candidate c is value
        `issued[c]`), unless `every_value` (the one-value test indexes keys by value)."""
        words = self._words if every_value else self._searched_words
        return LevelKeys(lv, *words[(lv, version)], per_value=self.profile.levels[lv - 1].per_value,
                         seed_key=self._seed_words.get((lv, version)))

    def _value_of(self, level: int, index: int | None) -> int | None:
        """The level value of candidate `index` (a spec v4 level searches its issued values only)."""
        issued = self.profile.levels[level - 1].issued
        return index if index is None or issued is None else issued[index]

    def _position_key(self, version: str) -> bytes:
        for t in self.tables[1]:
            if t.version == version:
                assert t.position is not None
                return t.position
        raise DecodeError(f"unknown level-1 version {version}")

    def _decide_level(self, lv: int, per_version: list[tuple[KeyTable, torch.Tensor, torch.Tensor]]):
        """Per text, (table, attribution) at the key version with the smallest whole-text level p-value.

        `per_version`: (table, window scores [B, W, cells, C], counts [B, W, K]) for every version of level
        `lv`; each text is decided at its own best version (the first on ties), texts sharing one in a batch."""
        per_value = self.profile.levels[lv - 1].per_value
        bits = self.profile.levels[lv - 1].key_bits
        tops = [region_tops(sc, cnt, per_value) for _, sc, cnt in per_version]
        if len(per_version) == 1:  # one version (no rotation): every text is decided with it, no selection
            return [(per_version[0][0], att) for att in decide_tops(tops[0], per_value, 1, self.alpha, bits)]
        b = per_version[0][1].shape[0]
        choice = np.stack([whole_text_log_p(tp) for tp in tops]).argmin(0)
        out: list[tuple[KeyTable, Attribution]] = [None] * b  # type: ignore[list-item]
        for k, ((t, _, _), tp) in enumerate(zip(per_version, tops, strict=True)):
            idx = np.flatnonzero(choice == k)
            if not len(idx):
                continue
            atts = decide_tops(tp.take(idx), per_value, len(per_version), self.alpha, bits)
            for i, att in zip(idx.tolist(), atts, strict=True):
                out[i] = (t, att)
        return out

    def decode_ids(self, batch: Sequence[Sequence[int]]) -> list[DecodeResult]:
        if not batch:
            return []
        if self.profile.multiplex is not None:
            return self._decode_multiplexed(batch)
        ids, lengths = self.pad(batch)
        # Level 1 decides the position key: score every level-1 version with its own positions.
        per_v1 = {t.version: self._scores(ids, lengths, t.version, [(1, t)]) for t in self.tables[1]}
        level1 = self._decide_level(1, [(t, per_v1[t.version][0][0], per_v1[t.version][1]) for t in self.tables[1]])
        deeper = [lv for lv in sorted(self.tables) if lv > 1]
        lts = [(lv, t) for lv in deeper for t in self.tables[lv]]
        # Deeper levels, scored under each text's level-1 position key: texts grouped by that version.
        deep_levels: list[list[tuple[KeyTable, Attribution]]] = [[None] * len(batch) for _ in deeper]  # type: ignore[list-item]
        for v in dict.fromkeys(t.version for t, _ in level1) if deeper else ():
            group = [i for i, (t, _) in enumerate(level1) if t.version == v]
            sel = torch.tensor(group, device=ids.device)
            scores = self._scores(ids[sel], lengths[sel], v, lts)[0]
            counts = per_v1[v][1][sel]
            j = 0
            for d, lv in enumerate(deeper):
                per_version = []
                for t in self.tables[lv]:
                    per_version.append((t, scores[j], counts))
                    j += 1
                for i, r in zip(group, self._decide_level(lv, per_version), strict=True):
                    deep_levels[d][i] = r
        # Scored tokens per segment [B][K] under each level-1 version: one reduction and one tolist() per batch
        # (per text, two small torch calls cost more than the rest of its result).
        seg_tokens = {v: cnt.sum(1).cpu().tolist() for v, (_, cnt) in per_v1.items()}
        results = []
        for i, (t1, att1) in enumerate(level1):
            seg = seg_tokens[t1.version][i]
            levels = [self._level_result(1, t1, att1, seg, batch[i])]
            for d, lv in enumerate(deeper):
                t, att = deep_levels[d][i]
                levels.append(self._level_result(lv, t, att, seg, batch[i]))
            hang_on_level1(levels, self.unavailable)
            n_scored = sum(seg)
            watermarked, log_p = text_verdict(levels, n_scored, self.alpha)
            results.append(
                DecodeResult(
                    watermarked=watermarked,
                    p_value=stats.to_p(log_p),
                    log10_p_value=_log10(log_p),
                    key_version=levels[0].key_version,
                    tokens_scored=n_scored,
                    levels=levels,
                    flags=text_flags(levels),
                    spec_version=self.profile.spec_version,
                )
            )
        return results

    def _decode_multiplexed(self, batch: Sequence[Sequence[int]]) -> list[DecodeResult]:
        """Spec v5: every level read at its own positions (engine/multiplexed.py), results as for v1-v4."""
        self.pad(batch)  # every id checked against the vocabulary before any scoring
        out = []
        for ids, reads in zip(batch, multiplexed.decode_reads(self, batch), strict=True):
            levels = [self._level_result(lv, r.table, r.attribution, [len(r.positions)], ids, r.positions)
                      for lv, r in enumerate(reads, start=1)]
            hang_on_level1(levels, self.unavailable)
            n_scored = reads[0].scored
            watermarked, log_p = text_verdict(levels, n_scored, self.alpha)
            out.append(DecodeResult(watermarked=watermarked, p_value=stats.to_p(log_p), log10_p_value=_log10(log_p),
                                    key_version=levels[0].key_version, tokens_scored=n_scored, levels=levels,
                                    flags=text_flags(levels), spec_version=self.profile.spec_version))
        return out

    def token_evidence(self, ids: Sequence[int]) -> tuple[DecodeResult, list[tuple[int, float]]]:
        """One text's decode plus, when level 1's own evidence is significant (`decoded`, `detected` or `mixed`:
        it then names its key version), the evidence each scored token gives the value the whole text supports
        (per cell): [(token position, score)], a score being Exp(1)-distributed without the mark (mean 1).

        Level 1 only, and only for a detected level: the map adds no field, but per-token evidence is a
        far faster oracle for the level's keys than one p-value per text, so the service shows it to
        trusted roles only (docs/service.md). Scored once more with one window per scored token.
        """
        result = self.decode_ids([ids])[0]
        lv1 = result.levels[0]
        if lv1.key_version is None:  # level 1's own evidence is not significant: nothing to show
            return result, []
        if self.profile.multiplex is not None:
            return result, self._multiplexed_token_evidence(ids, lv1.key_version)
        positions = reference.scored_positions(list(ids), self.profile.context_width)
        if not positions:
            return result, []
        table = next(t for t in self.tables[1] if t.version == lv1.key_version)
        prof = self.profile
        pk = prf.key_words([self._position_key(table.version)], self.device)
        keys = self._level_keys(1, table.version)
        spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride,
                           len(positions))
        padded, lengths = self.pad([ids])
        scores, counts = segment_scores(padded, lengths, spec, (pk[0][0], pk[1][0]), [keys])
        sc, cnt = scores[0][0].cpu(), counts[0].cpu()  # [W, cells, C], [W, K]
        winners = sc.sum(0).argmax(-1)  # per cell: the value the whole text supports (= the released one)
        cells = sc.shape[1]
        out = []
        for w, pos in enumerate(positions):
            cell = 0 if cells == 1 else int(cnt[w].argmax())
            out.append((pos, float(sc[w, cell, winners[cell]])))
        return result, out

    def _multiplexed_token_evidence(self, ids: Sequence[int], version: str) -> list[tuple[int, float]]:
        """Spec v5: the evidence each position level 1 read (under the hypothesis that explains the text) gives
        the value the whole text supports; positions that carry a private level are not shown."""
        table = next(t for t in self.tables[1] if t.version == version)
        padded, lengths = self.pad([ids])
        read = multiplexed.decide_level(
            self, 1, [(table, multiplexed.text_evidence(self, padded, lengths, [ids], version, [(1, table)]), 0)])[0]
        ev = multiplexed.text_evidence(self, padded, lengths, [ids], version, [(1, table)])[0]
        keep = np.isin(ev.positions, np.asarray(read.positions, dtype=np.int64))
        x = ev.x[0][keep]
        if not len(x):
            return []
        winner = int(x.sum(0).argmax())
        return [(int(p), float(v)) for p, v in zip(ev.positions[keep], x[:, winner], strict=True)]

    def _level_result(
        self, level: int, table: KeyTable, att: Attribution, seg_counts: list[int], ids: Sequence[int],
        read: list[int] | None = None,
    ) -> LevelResult:
        """`seg_counts`: the text's scored tokens per segment (under its level-1 version); `read` (spec v5): the
        text indices of the positions this level read, in the order its windows index them."""
        prof = self.profile
        lv = prof.levels[level - 1]
        tried = len(self.tables[level])
        undecoded = [k for k, c in enumerate(seg_counts) if c == 0] if not lv.per_value else []
        status, reason, matched = held_verdict(att, self.alpha, self.unavailable.get(level))
        positions = None
        if att.spans:
            positions = read if read is not None else reference.scored_positions(list(ids), prof.context_width)
        val = self._value_of
        bit_confidence = att.bit_confidence or [None] * lv.value_bits
        if lv.issued is not None:  # the posterior is over issued values: each bit is at least as sure as the value
            bit_confidence = [att.confidence if att.status == "decoded" else None] * lv.value_bits
        return LevelResult(
            level=level,
            key_version=table.version if matched else None,
            fields=value_fields(prof, level, val(level, att.value) if att.status == "decoded" else None),
            confidence=att.confidence,
            p_value=stats.to_p(att.log_p),
            log10_p_value=_log10(att.log_p),
            bit_confidence=bit_confidence,
            segment_tokens=list(seg_counts),  # its own list: the levels of a text share `seg_counts`
            undecoded_segments=undecoded,
            versions_tried=tried,
            status=status,
            reason=reason,
            most_likely=val(level, att.most_likely),
            searched=lv.searched,
            candidates=[
                {"fields": value_fields(prof, level, val(level, c.value)), "p_value": stats.to_p(c.log_p),
                 "tokens": c.tokens}
                for c in att.candidates
            ]
            if att.status == "mixed"
            else None,
            spans=[
                {
                    "start": positions[sp.start],
                    "end": positions[sp.end - 1] + 1,
                    "fields": value_fields(prof, level, val(level, sp.value)),
                }
                for sp in att.spans
            ]
            if positions
            else None,
        )


# -- decoding with the usable key versions only (the service's path: some versions may be gone) ---------------


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
            DecodeResult(False, 1.0, 0.0, None, 0, missing_levels(missing), spec_version=profile.spec_version)
            for _ in texts
        ]
    decoder = decoder or make_decoder(profile, tables, alpha=alpha, unavailable=unavailable, device=device)
    results = scorer.decode_texts(decoder, texts, tokenizer) if scorer else decoder.decode_texts(texts, tokenizer)
    return [with_availability(r, alpha, missing, not_tried or {}) for r in results]


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
