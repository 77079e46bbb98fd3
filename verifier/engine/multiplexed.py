"""Spec v5 decoding: each level reads only the positions its lane assigns it (docs/spec.md section 19).

A v5 text's marked positions each carry one level, chosen by the position's lane q (0..99, from the level-1
position key) and the generator's index t: public when q < `Multiplex.public_percent(t)`. A verifier sees text
indices, not generator indices, so it reads each level under every hypothesis of `Multiplex.hypotheses`:
`verbatim` (text index = generator index: the answer from its first token) and `excerpt` (every position at the
late share). A position read under the wrong hypothesis belongs to another level (or to none): its evidence is
Exp(1) for every candidate, so a wrong hypothesis costs power, never calibration; the level's p-value is
Bonferroni-corrected for the hypotheses as for key versions (the tries are versions x hypotheses).

Per-token evidence comes from the one evidence kernel (gpu/evidence.py, every backend bit-exact) with one window
per scored token, the lanes from its per-segment counts with 100 segments (the lane is the v1 segment formula
with K = 100). The level's window sums over its read positions (8 windows, sequential in text order, on the
host: the same arithmetic whatever backend scored) then go through the release rules of sections 13 and 18
unchanged (gpu/regions.py, engine/attribution.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu import prf
from gpu.evidence import segment_scores
from gpu.regions import region_tops
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine.attribution import Attribution, decide_tops, whole_text_log_p
from verifier.engine.keys import KeyTable
from verifier.engine.profile import MULTIPLEX_LANES, Multiplex, Profile
from verifier.engine.reference import scored_positions

# Per-token evidence is [texts, tokens, candidates] float64: texts are scored in groups whose evidence stays under
# this many elements (64 MiB per table), so a long batch never holds a [B, T, 4096] block at once.
EVIDENCE_BUDGET = 8 << 20


@dataclass
class TextEvidence:
    """One text under one level-1 version: its scored positions (text indices), their lanes, and per table
    the per-token evidence [n, C] (candidates in the decoder's search order)."""

    positions: np.ndarray
    lanes: np.ndarray
    x: list[np.ndarray]


def hypothesis_percents(mx: Multiplex, hypothesis: str, positions: np.ndarray) -> np.ndarray:
    """Public share (percent) a verifier assumes at each scored position under `hypothesis`."""
    if hypothesis == "excerpt":
        return np.full(positions.shape, mx.public, dtype=np.int64)
    return np.where(positions < mx.front_tokens, mx.front_public, mx.public).astype(np.int64)


def levels_read(mx: Multiplex, hypothesis: str, positions: np.ndarray, lanes: np.ndarray, depth: int) -> np.ndarray:
    """1-based level of each scored position under `hypothesis` (`Multiplex.level_of`, vectorised)."""
    pct = hypothesis_percents(mx, hypothesis, positions)
    deeper = 2 + np.maximum(lanes - pct, 0) * (depth - 1) // np.maximum(MULTIPLEX_LANES - pct, 1)
    return np.where(lanes < pct, 1, deeper)


def window_sums(x: np.ndarray, read: np.ndarray, windows: int) -> tuple[np.ndarray, np.ndarray]:
    """The read tokens' evidence summed per window ([W, C]; the j-th of m read tokens in window floor(j W / m)),
    each window a sequential sum in text order, and the tokens per window [W]."""
    rows = x[read]
    m = rows.shape[0]
    sums = np.zeros((windows, x.shape[1]), dtype=np.float64)
    counts = np.zeros(windows, dtype=np.int64)
    if not m:
        return sums, counts
    win = np.arange(m) * windows // m
    counts[:] = np.bincount(win, minlength=windows)
    rank = np.arange(m) - np.searchsorted(win, win)  # a token's place inside its window
    for k in range(int(counts.max())):  # k-th token of every window at once: each sum runs in text order
        at = rank == k
        sums[win[at]] += rows[at]
    return sums, counts


def text_evidence(decoder, ids: torch.Tensor, lengths: torch.Tensor, batch: Sequence[Sequence[int]],
                  pos_version: str, tables: list[tuple[int, KeyTable]],
                  keys: list[LevelKeys] | None = None) -> list[TextEvidence]:
    """Per text: positions, lanes (under level-1 version `pos_version`) and per table the per-token evidence.

    Each table is scored as a one-level profile's last level (the word of a token is its id: v5 routes nothing),
    under its own level key; candidates are the decoder's searched values (issued ones for a spec v4-style list),
    or `keys` when given (the one-value test's single key)."""
    prof: Profile = decoder.profile
    h = prof.context_width
    pos = [np.asarray(scored_positions(list(x), h), dtype=np.int64) for x in batch]
    n_tok = np.array([len(p) for p in pos])
    width = max(1, int(n_tok.max()) if len(n_tok) else 1)
    pk = prf.key_words([decoder._position_key(pos_version)], decoder.device)
    if keys is None:
        keys = [decoder._level_keys(lv, t.version) for lv, t in tables]
    keys = [LevelKeys(1, k.k0, k.k1, per_value=True, seed_key=k.seed_key) for k in keys]
    spec = ScoringSpec(h, prof.vocab_size, (), MULTIPLEX_LANES, 0, width)
    scores, counts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), keys)
    scores = [s.cpu().numpy() for s in scores]
    counts = counts.cpu().numpy()
    out = []
    for b, n in enumerate(n_tok.tolist()):
        win = np.arange(n) * width // max(n, 1)  # one scored token per window (W >= n)
        lanes = counts[b, win].argmax(-1) if n else np.zeros(0, dtype=np.int64)
        out.append(TextEvidence(pos[b], lanes.astype(np.int64), [s[b, win, 0] for s in scores]))
    return out


def groups(batch: Sequence[Sequence[int]], candidates: int) -> list[list[int]]:
    """Consecutive text indices whose per-token evidence ([len, max tokens, candidates]) fits EVIDENCE_BUDGET."""
    out: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i, x in enumerate(batch):
        w = max(width, len(x))
        if cur and (len(cur) + 1) * w * candidates > EVIDENCE_BUDGET:
            out.append(cur)
            cur, w = [], len(x)
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    return out


@dataclass
class LevelRead:
    """A level's attribution at the (key version, hypothesis) that explains the text best, and the text indices
    of the positions it read there (spans and the per-token map are reported in text indices)."""

    table: KeyTable
    attribution: Attribution
    hypothesis: str
    positions: list[int]


def decide_level(decoder, lv: int, per_version: list[tuple[KeyTable, list[TextEvidence], int]]) -> list[LevelRead]:
    """Per text, the level's attribution at the (version, hypothesis) with the smallest whole-text level
    p-value, corrected for every (version, hypothesis) tried. `per_version`: (table, per-text evidence, index of
    the table's evidence in `TextEvidence.x`)."""
    prof: Profile = decoder.profile
    mx = prof.multiplex
    assert mx is not None
    level = prof.levels[lv - 1]
    windows = prof.windows
    hyps = mx.hypotheses
    tries = []
    for t, evs, j in per_version:
        for hyp in hyps:
            sc, cn, reads = [], [], []
            for ev in evs:
                read = levels_read(mx, hyp, ev.positions, ev.lanes, prof.depth) == lv
                s, c = window_sums(ev.x[j], read, windows)
                sc.append(s)
                cn.append(c)
                reads.append(ev.positions[read].tolist())
            scores = torch.from_numpy(np.stack(sc)[:, :, None, :])  # [B, W, 1, C]
            counts = torch.from_numpy(np.stack(cn)[:, :, None])  # [B, W, 1]
            tries.append((t, hyp, region_tops(scores, counts, True), reads))
    b = len(per_version[0][1])
    choice = np.stack([whole_text_log_p(tp) for _, _, tp, _ in tries]).argmin(0) if len(tries) > 1 \
        else np.zeros(b, dtype=np.int64)
    out: list[LevelRead] = [None] * b  # type: ignore[list-item]
    for k, (t, hyp, tp, reads) in enumerate(tries):
        idx = np.flatnonzero(choice == k)
        if not len(idx):
            continue
        atts = decide_tops(tp.take(idx), True, len(tries), decoder.alpha, level.key_bits)
        for i, att in zip(idx.tolist(), atts, strict=True):
            out[i] = LevelRead(t, att, hyp, reads[i])
    return out


def decode_reads(decoder, batch: Sequence[Sequence[int]]) -> list[list[LevelRead]]:
    """Per text, one `LevelRead` per level the decoder holds (level 1 first). Level 1 names the position key:
    deeper levels are read under the lanes of the level-1 version that explains the text."""
    deeper = [lv for lv in sorted(decoder.tables) if lv > 1]
    widest = max(len(t.entries) for ts in decoder.tables.values() for t in ts)
    out: list[list[LevelRead]] = [[] for _ in batch]
    for group in groups(batch, widest):
        sub = [batch[i] for i in group]
        ids, lengths = decoder.pad(sub)
        ev1 = {t.version: text_evidence(decoder, ids, lengths, sub, t.version, [(1, t)]) for t in decoder.tables[1]}
        level1 = decide_level(decoder, 1, [(t, ev1[t.version], 0) for t in decoder.tables[1]])
        for g, r in enumerate(level1):
            out[group[g]].append(r)
        if not deeper:
            continue
        lts = [(lv, t) for lv in deeper for t in decoder.tables[lv]]
        for v in dict.fromkeys(r.table.version for r in level1):
            members = [g for g, r in enumerate(level1) if r.table.version == v]
            sel = torch.tensor(members, device=ids.device)
            evs = text_evidence(decoder, ids[sel], lengths[sel], [sub[g] for g in members], v, lts)
            j = 0
            for lv in deeper:
                per_version = []
                for t in decoder.tables[lv]:
                    per_version.append((t, evs, j))
                    j += 1
                for g, r in zip(members, decide_level(decoder, lv, per_version), strict=True):
                    out[group[g]].append(r)
    return out


__all__ = [
    "EVIDENCE_BUDGET",
    "LevelRead",
    "TextEvidence",
    "decide_level",
    "decode_reads",
    "levels_read",
    "text_evidence",
    "window_sums",
]
