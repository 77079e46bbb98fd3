"""HeRo decoder: token ids (or text) -> per-level fields, confidences and calibrated p-values.

Only the key tables handed in are used, so a caller holding level-1 tables learns nothing about
level 2 (its evidence is never computed). Each level may come with several key versions (rotation);
the best-matching version is reported with its p-value Bonferroni-corrected for the versions tried.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import torch
from scipy import integrate
from scipy import stats as sps

from gpu import prf
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine import stats
from verifier.engine.keys import KeyTable
from verifier.engine.payload import decode_fields
from verifier.engine.profile import Profile

DEFAULT_ALPHA = 1e-4


class DecodeError(ValueError):
    """The input cannot be decoded at all (no keys, empty text, ids outside the vocabulary)."""


@dataclass
class LevelResult:
    level: int
    key_version: str | None
    fields: dict[str, int | None]
    confidence: float
    p_value: float
    log10_p_value: float
    bit_confidence: list[float | None]
    segment_tokens: list[int]
    undecoded_segments: list[int]
    versions_tried: int
    status: str = "decoded"  # decoded | undecodable
    reason: str | None = None


@dataclass
class DecodeResult:
    watermarked: bool
    p_value: float
    log10_p_value: float
    key_version: str | None
    tokens_scored: int
    levels: list[LevelResult] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _log10(log_p: float) -> float:
    return log_p / math.log(10.0)


def _level_log_p(scores: torch.Tensor, counts: torch.Tensor, candidates: int) -> float:
    """Fisher combination over segments with tokens of each segment's max-of-Gamma p-value."""
    logs = []
    for k in range(scores.shape[0]):
        n = int(counts[k])
        if n == 0:
            continue
        best = float(scores[k].max())
        logs.append(stats.log_max_pvalue(stats.log_gamma_sf(n, best), candidates))
    return stats.log_fisher(logs)


@functools.lru_cache(maxsize=16)
def _expected_max_normal(m: int) -> float:
    """E[max of m iid N(0,1)], to remove the winner's selection bias from the rate estimate."""
    if m <= 1:
        return 0.0
    f = lambda x: x * m * sps.norm.pdf(x) * sps.norm.cdf(x) ** (m - 1)  # noqa: E731
    return float(integrate.quad(f, -12, 12)[0])


def _posteriors(scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Plug-in posterior over candidates per segment [K, C].

    Model: the true candidate's evidence is Exp(rate r < 1), the others Exp(1), so the likelihood
    ratio of candidate a is exp((1 - r) S_a). r is estimated from the winners' excess over what the
    maximum of C null Gamma(n_k, 1) scores would be (~ n_k + sqrt(n_k) E[max of C normals]); with
    no excess the posterior is flat, so unmarked text gets bit confidences near 1/2.
    """
    live = counts > 0
    n = float(counts[live].sum())
    if n == 0:
        return torch.full_like(scores, 1.0 / scores.shape[1])
    bias = _expected_max_normal(scores.shape[1]) * float(counts[live].double().sqrt().sum())
    signal = float(scores.max(dim=1).values[live].sum()) - bias
    rate = min(1.0, max(0.05, n / signal)) if signal > 0 else 1.0
    return torch.softmax((1.0 - rate) * scores, dim=1)


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
        self.profile = profile
        self.tables = {lv: list(ts) for lv, ts in tables.items()}
        self.alpha = alpha
        self.device = torch.device(device)
        self.unavailable = dict(unavailable or {})
        self._words = {
            (lv, t.version): prf.key_words(list(t.entries), self.device) for lv, ts in self.tables.items() for t in ts
        }

    # -- inputs -----------------------------------------------------------------------------
    def pad(self, batch: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([len(x) for x in batch], dtype=torch.int64)
        width = max(1, int(lengths.max()) if len(batch) else 1)
        ids = torch.zeros(len(batch), width, dtype=torch.int64)
        for i, row in enumerate(batch):
            if row:
                t = torch.as_tensor(list(row), dtype=torch.int64)
                if int(t.min()) < 0 or int(t.max()) >= self.profile.vocab_size:
                    raise DecodeError(f"text {i}: token ids outside the profile vocabulary")
                ids[i, : len(row)] = t
        return ids.to(self.device), lengths.to(self.device)

    def decode_texts(self, texts: Sequence[str], tokenizer) -> list[DecodeResult]:
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise DecodeError(f"text {i} is empty")
        ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return self.decode_ids(ids)

    # -- decoding ---------------------------------------------------------------------------
    def _scores(self, ids, lengths, pos_version: str, level_tables: list[tuple[int, KeyTable]]):
        pk = prf.key_words([self._position_key(pos_version)], self.device)
        lk = [LevelKeys(lv, *self._words[(lv, t.version)]) for lv, t in level_tables]
        prof = self.profile
        spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride)
        scores, counts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), lk)
        return [s[:, 0] for s in scores], counts[:, 0]

    def _position_key(self, version: str) -> bytes:
        for t in self.tables[1]:
            if t.version == version:
                assert t.position is not None
                return t.position
        raise DecodeError(f"unknown level-1 version {version}")

    def decode_ids(self, batch: Sequence[Sequence[int]]) -> list[DecodeResult]:
        if not batch:
            return []
        ids, lengths = self.pad(batch)
        nb = ids.shape[0]
        # Level 1 decides the position key: score every level-1 version with its own positions.
        l1 = self.tables[1]
        per_v1 = []
        for t in l1:
            (sc,), counts = self._scores(ids, lengths, t.version, [(1, t)])
            per_v1.append((t, sc, counts))
        results: list[DecodeResult] = []
        chosen_v1: list[tuple[KeyTable, torch.Tensor, torch.Tensor, float]] = []
        for i in range(nb):
            best = None
            for t, sc, counts in per_v1:
                lp = _level_log_p(sc[i], counts[i], len(t.entries))
                if best is None or lp < best[3]:
                    best = (t, sc[i], counts[i], lp)
            chosen_v1.append(best)  # type: ignore[arg-type]
        deeper = [lv for lv in sorted(self.tables) if lv > 1]
        deep_scores: dict[str, tuple[list[torch.Tensor], torch.Tensor]] = {}
        if deeper:
            for v1 in {c[0].version for c in chosen_v1}:
                lts = [(lv, t) for lv in deeper for t in self.tables[lv]]
                deep_scores[v1] = self._scores(ids, lengths, v1, lts)
        for i in range(nb):
            t1, sc1, counts, lp1 = chosen_v1[i]
            lp1 = stats.log_bonferroni(lp1, len(l1))
            levels = [self._level_result(1, t1, sc1, counts, lp1, len(l1))]
            if deeper:
                scs, _ = deep_scores[t1.version]
                j = 0
                for lv in deeper:
                    best = None
                    for t in self.tables[lv]:
                        s = scs[j][i]
                        j += 1
                        lp = _level_log_p(s, counts, len(t.entries))
                        if best is None or lp < best[2]:
                            best = (t, s, lp)
                    assert best is not None
                    lp = stats.log_bonferroni(best[2], len(self.tables[lv]))
                    levels.append(self._level_result(lv, best[0], best[1], counts, lp, len(self.tables[lv])))
            log_p = stats.log_fisher([lv.log10_p_value * math.log(10.0) for lv in levels])
            n_scored = int(counts.sum())
            results.append(
                DecodeResult(
                    watermarked=n_scored > 0 and stats.to_p(log_p) <= self.alpha,
                    p_value=stats.to_p(log_p),
                    log10_p_value=_log10(log_p),
                    key_version=t1.version,
                    tokens_scored=n_scored,
                    levels=levels,
                )
            )
        return results

    def _level_result(
        self, level: int, table: KeyTable, scores: torch.Tensor, counts: torch.Tensor, log_p: float, tried: int
    ) -> LevelResult:
        prof = self.profile
        b = prof.levels[level - 1].bits
        post = _posteriors(scores, counts)
        values: list[int | None] = []
        bit_conf: list[float | None] = []
        conf = 1.0
        for k in range(prof.segments):
            if int(counts[k]) == 0:
                values.append(None)
                bit_conf.extend([None] * b)
                continue
            v = int(scores[k].argmax())
            values.append(v)
            conf *= float(post[k, v])
            cand = torch.arange(post.shape[1])
            for i in range(b - 1, -1, -1):
                agree = ((cand >> i) & 1) == ((v >> i) & 1)
                bit_conf.append(float(post[k][agree].sum()))
        undecoded = [k for k, v in enumerate(values) if v is None]
        status, reason = "decoded", None
        if len(undecoded) == prof.segments:
            conf = 0.0
            status, reason = "undecodable", "no scored tokens (text too short or fully repetitive)"
        if level in self.unavailable and stats.to_p(log_p) > self.alpha:
            reason = self.unavailable[level]
        return LevelResult(
            level=level,
            key_version=table.version,
            fields=decode_fields(prof, level, values),
            confidence=conf,
            p_value=stats.to_p(log_p),
            log10_p_value=_log10(log_p),
            bit_confidence=bit_conf,
            segment_tokens=[int(c) for c in counts],
            undecoded_segments=undecoded,
            versions_tried=tried,
            status=status,
            reason=reason,
        )
