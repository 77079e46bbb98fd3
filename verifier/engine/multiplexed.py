"""Spec v5 decoding: each level reads only the positions its lane assigns it (docs/spec.md section 19).

A v5 text's marked positions each carry one level, chosen by the position's lane q (0..99, from the level-1
position key) and the generator's index t: public when q < `Multiplex.public_percent(t)`. A verifier sees text
indices, not generator indices, so it reads each level under every hypothesis of `Multiplex.hypotheses`:
`verbatim` (text index = generator index: the answer from its first token) and `excerpt` (every position at the
late share). A position read under the wrong hypothesis belongs to another level (or to none): its evidence is
Exp(1) for every candidate, so a wrong hypothesis costs power, never calibration; the level's p-value is
Bonferroni-corrected for the hypotheses as for key versions (the tries are versions x hypotheses).

A decode reads each level through the evidence kernel (gpu/evidence.py, every backend bit-exact) once per (texts
of one level-1 version, hypothesis, level): its read filter (gpu/scoring.py `ReadFilter`) keeps the positions the
level reads there and sums them into the profile's 8 windows (the j-th of m read tokens in window floor(j W / m),
each window a sequential sum in text order). The scored positions and their lanes (the v1 segment formula with
K = 100), for the positions each level read, come from `cpu_kernel.scored_positions` (torch's PRF off the CPU).
The window sums then go through the release rules of sections 13 and 18 unchanged (gpu/regions.py,
engine/attribution.py).

`text_evidence` gives per-token evidence ([n, C] per text, one window per scored token) to the callers that need
each token's value (the per-token map, `expect`, model-aware decoding); `window_sums` sums it on the host with the
kernel's arithmetic, and `decide_level` still accepts it (the per-token map; tests compare both paths).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu import cpu_kernel, prf
from gpu.evidence import segment_scores
from gpu.regions import RegionTops, region_tops
from gpu.scoring import LevelKeys, ReadFilter, ScoringSpec, scored_tokens
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


@dataclass
class Reads:
    """Texts the kernel reads under one level-1 version: the padded batch, the scored positions of all texts
    (row, text index, lane; rows in order, positions in text order), the position key, and the level keys of the
    tables to score (one-level form)."""

    ids: torch.Tensor
    lengths: torch.Tensor
    row: np.ndarray
    position: np.ndarray
    lane: np.ndarray
    position_key: tuple[torch.Tensor, torch.Tensor]
    keys: list[LevelKeys]

    def read(self, mx: Multiplex, hypothesis: str, level: int, depth: int) -> Callable[[int], list[int]]:
        """Text i -> the text indices of the positions `level` reads under `hypothesis` (listed on demand: a
        decode lists them for the one try it keeps per text)."""
        keep = levels_read(mx, hypothesis, self.position, self.lane, depth) == level
        kept = self.position[keep]
        cut = np.searchsorted(self.row[keep], np.arange(len(self.ids) + 1))
        return lambda i: kept[cut[i] : cut[i + 1]].tolist()


def _lanes(decoder, ids: torch.Tensor, lengths: torch.Tensor, batch: Sequence[Sequence[int]], pos_version: str,
           keys: list[LevelKeys]) -> tuple[list[np.ndarray], np.ndarray, tuple, list[torch.Tensor], int]:
    """Scored positions per text, the kernel's output with one window per scored token (lanes = 100 segments),
    the position key, and the window count."""
    prof: Profile = decoder.profile
    h = prof.context_width
    pos = [np.asarray(scored_positions(list(x), h), dtype=np.int64) for x in batch]
    width = max(1, max((len(p) for p in pos), default=1))
    pk = prf.key_words([decoder._position_key(pos_version)], decoder.device)
    key = (pk[0][0], pk[1][0])
    spec = ScoringSpec(h, prof.vocab_size, (), MULTIPLEX_LANES, 0, width)
    scores, counts = segment_scores(ids, lengths, spec, key, keys)
    return pos, counts.cpu().numpy(), key, scores, width


def _one_level(keys: list[LevelKeys]) -> list[LevelKeys]:
    """Each table scored as a one-level profile's last level (the word of a token is its id: v5 routes nothing)."""
    return [LevelKeys(1, k.k0, k.k1, per_value=True, seed_key=k.seed_key) for k in keys]


def text_reads(decoder, ids: torch.Tensor, lengths: torch.Tensor, batch: Sequence[Sequence[int]], pos_version: str,
               tables: list[tuple[int, KeyTable]]) -> Reads:
    """The texts' positions and lanes under level-1 version `pos_version` (no evidence yet), and each table's level
    keys, for `decide_level` to score each level's read positions in the kernel."""
    prof: Profile = decoder.profile
    h = prof.context_width
    pk = prf.key_words([decoder._position_key(pos_version)], decoder.device)
    key = (pk[0][0], pk[1][0])
    if ids.device.type == "cpu" and cpu_kernel.available():
        row, position, lane = (x.numpy() for x in cpu_kernel.scored_positions(ids, lengths, h, key, MULTIPLEX_LANES))
    else:
        st = scored_tokens(ids, lengths, h)
        s0, s1 = prf.prf_seed(key[0], key[1], st.context)
        row, position = st.row.cpu().numpy(), st.position.cpu().numpy()
        lane = prf.position_of(s0, s1, MULTIPLEX_LANES).cpu().numpy()
    keys = _one_level([decoder._level_keys(lv, t.version) for lv, t in tables])
    return Reads(ids, lengths, row, position, lane.astype(np.int64), key, keys)


def text_evidence(decoder, ids: torch.Tensor, lengths: torch.Tensor, batch: Sequence[Sequence[int]],
                  pos_version: str, tables: list[tuple[int, KeyTable]],
                  keys: list[LevelKeys] | None = None) -> list[TextEvidence]:
    """Per text: positions, lanes (under level-1 version `pos_version`) and per table the per-token evidence.

    Each table is scored as a one-level profile's last level (the word of a token is its id: v5 routes nothing),
    under its own level key; candidates are the decoder's searched values (issued ones for a spec v4-style list),
    or `keys` when given (the one-value test's single key)."""
    if keys is None:
        keys = [decoder._level_keys(lv, t.version) for lv, t in tables]
    pos, counts, _, scores, width = _lanes(decoder, ids, lengths, batch, pos_version, _one_level(keys))
    scores = [s.cpu().numpy() for s in scores]
    out = []
    for b, n in enumerate(len(p) for p in pos):
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
    of the positions it read there (spans and the per-token map are reported in text indices), and how many
    positions of the text are scored (section 8's rule)."""

    table: KeyTable
    attribution: Attribution
    hypothesis: str
    positions: list[int]
    scored: int = 0


def _host_tops(decoder, lv: int, hyp: str, evs: list[TextEvidence], j: int) -> tuple[RegionTops, list[list[int]]]:
    """A level's window sums under `hyp` from per-token evidence (`window_sums`), and the positions it read."""
    prof: Profile = decoder.profile
    sc, cn, reads = [], [], []
    for ev in evs:
        read = levels_read(prof.multiplex, hyp, ev.positions, ev.lanes, prof.depth) == lv
        s, c = window_sums(ev.x[j], read, prof.windows)
        sc.append(s)
        cn.append(c)
        reads.append(ev.positions[read].tolist())
    scores = torch.from_numpy(np.stack(sc)[:, :, None, :])  # [B, W, 1, C]
    counts = torch.from_numpy(np.stack(cn)[:, :, None])  # [B, W, 1]
    return region_tops(scores, counts, True), reads


def _kernel_tops(decoder, lv: int, hyp: str, src: Reads, js: list[int]) -> list[RegionTops]:
    """One kernel call: the level's window sums ([B, W, 1, C]) under `hyp` for the tables `src.keys[j]`, j in
    `js`, over the positions it reads there only (gpu/scoring.py `ReadFilter`)."""
    prof: Profile = decoder.profile
    mx = prof.multiplex
    rf = ReadFilter(mx.front_tokens, mx.front_public, mx.public, prof.depth, lv, hyp == "excerpt")
    spec = ScoringSpec(prof.context_width, prof.vocab_size, (), MULTIPLEX_LANES, 0, prof.windows, rf)
    scores, counts = segment_scores(src.ids, src.lengths, spec, src.position_key, [src.keys[j] for j in js])
    return [region_tops(s, counts, True) for s in scores]  # per value: the lane counts summed per window


def decide_level(decoder, lv: int, per_version: list[tuple[KeyTable, Reads | list[TextEvidence], int]],
                 ) -> list[LevelRead]:
    """Per text, the level's attribution at the (version, hypothesis) with the smallest whole-text level
    p-value, corrected for every (version, hypothesis) tried. `per_version`: (table, its texts, index of the
    table's keys in `Reads.keys`). Texts as `Reads` (a decode) are scored in the kernel, one call per (`Reads`,
    hypothesis) for all its tables of the level; as per-token evidence (`text_evidence`: j indexes
    `TextEvidence.x`) they are summed on the host, with the same bits on the C kernel."""
    prof: Profile = decoder.profile
    mx = prof.multiplex
    assert mx is not None
    level = prof.levels[lv - 1]
    hyps = mx.hypotheses
    sources: dict[int, tuple[Reads | list[TextEvidence], list[tuple[int, int]]]] = {}
    for k, (_, src, j) in enumerate(per_version):
        sources.setdefault(id(src), (src, []))[1].append((k, j))
    found: dict[tuple[int, str], tuple[RegionTops, Callable[[int], list[int]]]] = {}
    for hyp in hyps:
        for src, members in sources.values():
            if isinstance(src, Reads):
                reads = src.read(mx, hyp, lv, prof.depth)
                for (k, _), tp in zip(members, _kernel_tops(decoder, lv, hyp, src, [j for _, j in members]),
                                      strict=True):
                    found[k, hyp] = (tp, reads)
            else:
                for k, j in members:
                    tp, positions = _host_tops(decoder, lv, hyp, src, j)
                    found[k, hyp] = (tp, positions.__getitem__)
    tries = [(t, hyp, *found[k, hyp]) for k, (t, _, _) in enumerate(per_version) for hyp in hyps]
    src0 = per_version[0][1]
    if isinstance(src0, Reads):
        scored = np.bincount(src0.row, minlength=len(src0.ids)).tolist()
    else:
        scored = [len(ev.positions) for ev in src0]
    b = len(scored)
    choice = np.stack([whole_text_log_p(tp) for _, _, tp, _ in tries]).argmin(0) if len(tries) > 1 \
        else np.zeros(b, dtype=np.int64)
    out: list[LevelRead] = [None] * b  # type: ignore[list-item]
    for k, (t, hyp, tp, reads) in enumerate(tries):
        idx = np.flatnonzero(choice == k)
        if not len(idx):
            continue
        atts = decide_tops(tp.take(idx), True, len(tries), decoder.alpha, level.key_bits)
        for i, att in zip(idx.tolist(), atts, strict=True):
            out[i] = LevelRead(t, att, hyp, reads(i), scored[i])
    return out


def decode_reads(decoder, batch: Sequence[Sequence[int]]) -> list[list[LevelRead]]:
    """Per text, one `LevelRead` per level the decoder holds (level 1 first). Level 1 names the position key:
    deeper levels are read under the lanes of the level-1 version that explains the text. Each level's window
    sums come from the kernel's read filter (texts in `groups` of at most EVIDENCE_BUDGET [B, tokens, 100]
    elements, so one call's per-token scratch stays bounded)."""
    return _decode_reads(decoder, batch, text_reads, MULTIPLEX_LANES)


def _decode_reads_per_token(decoder, batch: Sequence[Sequence[int]]) -> list[list[LevelRead]]:
    """`decode_reads` from per-token evidence summed on the host (the path before the kernel's read filter; the
    tests check that both give the same bits)."""
    widest = max(len(t.entries) for ts in decoder.tables.values() for t in ts)
    return _decode_reads(decoder, batch, text_evidence, widest)


def _decode_reads(decoder, batch: Sequence[Sequence[int]], source, width: int) -> list[list[LevelRead]]:
    deeper = [lv for lv in sorted(decoder.tables) if lv > 1]
    out: list[list[LevelRead]] = [[] for _ in batch]
    for group in groups(batch, width):
        sub = [batch[i] for i in group]
        ids, lengths = decoder.pad(sub)
        ev1 = {t.version: source(decoder, ids, lengths, sub, t.version, [(1, t)]) for t in decoder.tables[1]}
        level1 = decide_level(decoder, 1, [(t, ev1[t.version], 0) for t in decoder.tables[1]])
        for g, r in enumerate(level1):
            out[group[g]].append(r)
        if not deeper:
            continue
        lts = [(lv, t) for lv in deeper for t in decoder.tables[lv]]
        for v in dict.fromkeys(r.table.version for r in level1):
            members = [g for g, r in enumerate(level1) if r.table.version == v]
            sel = torch.tensor(members, device=ids.device)
            evs = source(decoder, ids[sel], lengths[sel], [sub[g] for g in members], v, lts)
            for lv, per_version in deeper_tries(decoder, deeper, evs):
                for g, r in zip(members, decide_level(decoder, lv, per_version), strict=True):
                    out[group[g]].append(r)
    return out


def deeper_tries(decoder, deeper: list[int], evidence) -> list[tuple[int, list[tuple[KeyTable, object, int]]]]:
    """Per deeper level, its (table, evidence, index of the table's evidence) for every key version: the deeper
    tables are scored in one call, in the order `[(lv, t) for lv in deeper for t in decoder.tables[lv]]`."""
    out, j = [], 0
    for lv in deeper:
        tables = decoder.tables[lv]
        out.append((lv, [(t, evidence, j + k) for k, t in enumerate(tables)]))
        j += len(tables)
    return out


__all__ = [
    "EVIDENCE_BUDGET",
    "LevelRead",
    "Reads",
    "TextEvidence",
    "decide_level",
    "decode_reads",
    "deeper_tries",
    "levels_read",
    "text_evidence",
    "text_reads",
    "window_sums",
]
