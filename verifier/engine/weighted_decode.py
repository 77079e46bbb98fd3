"""Decoding with the weighted statistic: the Decoder's keys and release rules, per-token weights from the text.

`WeightedDecoder(decoder).decode_ids(batch, weights)` gives the `DecodeResult`s `Decoder.decode_ids` gives,
with every level's statistic the weighted sum of engine/weighted.py instead of the equal-weight sum:
per text and level, a weight per scored token (a function of the text only: the same for every candidate
value, so the null law of each candidate's statistic is known and the p-values stay calibrated). The
release rules (decoded / absent / mixed, regions, thresholds) are engine/attribution.py's, applied to the
weighted tails. Model-aware scoring (`scoring: "model-aware"`) takes the weights from the profile's LM
re-run over the text (verifier/engine/model_aware.py, `Weighting`); equal weights reproduce the model-free
p-values (tests/engine/test_weighted_stats.py).

Per-token evidence comes from the same kernel with one window per scored token (as
`Decoder.token_evidence` does), so every backend's bit-exact evidence is what is weighted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu import prf
from gpu.evidence import segment_scores
from gpu.scoring import ScoringSpec
from verifier.engine import multiplexed, stats, weighted
from verifier.engine.attribution import Attribution, _bit_confidence, _Region, posterior_batch
from verifier.engine.decoder import Decoder, DecodeResult, _log10
from verifier.engine.keys import KeyTable
from verifier.engine.verdicts import absent, decide_value, gate, opened_level, text_flags, text_verdict, unscored

MODEL_FREE = "model-free"
MODEL_AWARE = "model-aware"
SCORINGS = (MODEL_FREE, MODEL_AWARE)
LINEAR = "linear"  # T = sum w_t X_t, X_t = -log(1 - U_t); upper tail (spec 16.1)
LIKELIHOOD_RATIO = "likelihood-ratio"  # T = sum w_t Y_t, Y_t = -log U_t; lower tail (spec 16.4)
UNION = "union"  # the best of UNION_PARTS per candidate, times their number (a union bound; spec 16.5)
STATISTICS = (LINEAR, LIKELIHOOD_RATIO, UNION)
DEFAULT_CLIP = {LINEAR: 4.0, LIKELIHOOD_RATIO: 5.0}
# the union's parts: equal weights (model-free, what survives edits best), linear and likelihood-ratio weights
UNION_PARTS = (LINEAR, LINEAR, LIKELIHOOD_RATIO)
# model-aware scoring's statistic unless the deployment picks another (HERO_MODEL_AWARE_STATISTIC): the union,
# at least as strong as each single statistic on verbatim, edited and spliced text (measured 2026-11-28)
DEFAULT_STATISTIC = UNION
# the union reads each text once more per floor, with every token the LM re-run gives less than the floor taken
# for an edit: it and the h positions after it (whose keys it seeded) weigh 0 (spec 16.6; the floors chosen on
# docs/research/2026-11-spec-v3-notes.md: 1e-4 suits top-k/top-p text, 1e-5 text sampled at T = 1)
DEFAULT_EDIT_FLOORS = (1e-4, 1e-5)
_GRID = 48  # tail evaluations per cell for the confidence model's Gamma-equivalent scores


@dataclass(frozen=True)
class Weighting:
    """Per-token weights from the level probabilities p, for one of two statistics, made robust:

    - `statistic`: LINEAR (model-aware scoring's default) weighs X = -log(1 - U) by H(1/p) - 1
      (engine/weighted.optimal_weight), the locally most powerful weight for X; LIKELIHOOD_RATIO
      (HERO_MODEL_AWARE_STATISTIC=likelihood-ratio) weighs Y = -log U by 1/p - 1, the log-likelihood ratio
      of U ~ Beta(1/p, 1) against Uniform up to a constant: the Neyman-Pearson statistic when p is right,
      stronger on verbatim text, weaker on edited or spliced text (docs/research/2026-11-spec-v3-notes.md);
      UNION (HERO_MODEL_AWARE_STATISTIC=union) reads each candidate under equal, linear and likelihood-ratio
      weights at once and keeps the best tail times the number of readings (spec 16.5); its weights are
      [3, n, levels] from `__call__`, [3 (1 + len(edit_floors)), n, levels] from `for_text`;
    - `mix`: the verifier's probability is mixed with a flat floor, p' = (1 - mix) p + mix, before the
      weight is taken;
    - `clip`: no token weighs more than `clip` (default 4 linear, 5 likelihood ratio: the re-run lacks the
      prompt and a replaced token is improbable to the model: an unclipped 1/p - 1 lets one such token swamp
      the sum);
    - `edit_floors` (UNION, `for_text` only): per floor, the three readings again with every token whose
      re-run probability (the product of its level probabilities) is below the floor read as an edit: it and
      the `context_width` positions after it weigh 0 (their keys came from a context the generator never saw:
      noise that only dilutes the sum). The union keeps the unedited readings, so verbatim text loses only
      the larger union factor; the weights stay a function of the text alone (every p-value keeps its law).
    """

    statistic: str = LINEAR
    clip: float | None = None
    mix: float = 0.0
    edit_floors: tuple[float, ...] = DEFAULT_EDIT_FLOORS

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}")
        if not all(0.0 < f < 1.0 for f in self.edit_floors):
            raise ValueError("every edit floor must be in (0, 1)")

    def for_text(self, p: np.ndarray, ids: Sequence[int], context_width: int) -> np.ndarray:
        """One text's weights: `self(p)`, and for UNION one more set of readings per edit floor, with the
        positions `edited_positions` flags weighed 0 (always present, so the union factor is fixed)."""
        w = self(p)
        if self.statistic != UNION or not self.edit_floors:
            return w
        plausibility = _window_plausibility(p, ids, context_width)
        readings = [w]
        for floor in self.edit_floors:
            masked = np.array(w, copy=True)
            masked[:, plausibility < floor, :] = 0.0
            readings.append(masked)
        return np.concatenate(readings, axis=0)

    def __call__(self, p: np.ndarray) -> np.ndarray:
        """Weights [n, levels] (UNION: [3, n, levels], one slice per part of UNION_PARTS)."""
        if self.statistic == UNION:
            p = np.asarray(p, dtype=np.float64)
            return np.stack([np.ones_like(p), Weighting(LINEAR, self.clip, self.mix)(p),
                             Weighting(LIKELIHOOD_RATIO, self.clip, self.mix)(p)])
        q = np.clip((1.0 - self.mix) * np.asarray(p, dtype=np.float64) + self.mix, 1e-12, 1.0)
        w = weighted.optimal_weight(q) if self.statistic == LINEAR else 1.0 / q - 1.0
        return np.minimum(w, DEFAULT_CLIP[self.statistic] if self.clip is None else self.clip)


def edited_positions(p: np.ndarray, ids: Sequence[int], context_width: int, floor: float) -> np.ndarray:
    """[n] bool over a text's scored positions (reference.scored_positions order): True where the token at
    that position, or one of the `context_width` tokens before it, is a scored token whose re-run probability
    (the product of its row of `p`, [n, levels]) is below `floor` (an unscored token is taken as plausible)."""
    return _window_plausibility(p, ids, context_width) < floor


def _window_plausibility(p: np.ndarray, ids: Sequence[int], context_width: int) -> np.ndarray:
    """[n]: per scored position t, the smallest re-run probability of the scored tokens at t - h .. t (one
    pass per text, whatever the number of floors compared against it)."""
    pos = np.asarray(_positions(ids, context_width), dtype=np.int64)
    if not len(pos):
        return np.ones(0)
    token_p = np.ones(len(ids) + context_width)  # h leading 1s: windows that start before the text
    token_p[pos + context_width] = np.prod(np.asarray(p, dtype=np.float64)[: len(pos)], axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(token_p, context_width + 1)  # row t: tokens t - h .. t
    return windows[pos].min(axis=1)


Parts = list[tuple[str, np.ndarray]]  # one level's (statistic, weights [n]) per part


def _level_parts(statistic: str, w: np.ndarray, col: int, union_parts: tuple[str, ...] = UNION_PARTS) -> Parts:
    """One level's parts from a text's weights ([n, levels], or [parts, n, levels] for UNION)."""
    if statistic == UNION:
        k = len(union_parts)  # readings repeat the parts (all tokens, then once per edit floor)
        return [(union_parts[j % k], np.asarray(w[j, :, col], dtype=np.float64)) for j in range(w.shape[0])]
    return [(statistic, np.asarray(w[:, col], dtype=np.float64))]


def _statistic_evidence(statistic: str, x: np.ndarray) -> np.ndarray:
    """The per-token evidence a statistic sums, oriented so that larger is more evidence for a candidate:
    X itself (linear), or log U = log(1 - exp(-X)) (likelihood ratio: -log U is small under the mark)."""
    if statistic == LINEAR:
        return x
    return np.log(-np.expm1(-np.maximum(x, 1e-300)))


def _statistic_log_tail(statistic: str, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """log P[a null candidate's oriented sum >= s] for weights w ([M, n]) and sums s ([M])."""
    if statistic == LINEAR:
        return weighted.weighted_log_sf(w, s)
    return weighted.weighted_log_cdf(w, -np.asarray(s))


@dataclass
class _TokenEvidence:
    """One text, one table: per scored token (text order) its evidence [n, cells, C] and cell [n]."""

    x: np.ndarray
    cell: np.ndarray


class WeightedDecoder:
    """Weighted decoding for the levels and versions a `Decoder` holds (its keys, alpha, unavailable).

    `statistic` must be the one the weights were made for (`Weighting.statistic`): LINEAR by default, where
    equal weights are model-free decoding exactly. `union_parts` (UNION only): the statistic of each reading in
    a group, UNION_PARTS unless a benchmark compares subsets (research/statistic_alternatives.py)."""

    def __init__(self, decoder: Decoder, scoring: str = MODEL_AWARE, statistic: str = LINEAR,
                 union_parts: tuple[str, ...] = UNION_PARTS) -> None:
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}")
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}")
        if not union_parts or not set(union_parts) <= {LINEAR, LIKELIHOOD_RATIO}:
            raise ValueError(f"union parts must be a non-empty sequence of {LINEAR!r} / {LIKELIHOOD_RATIO!r}")
        self.decoder = decoder
        self.scoring = scoring
        self.statistic = statistic
        self.union_parts = tuple(union_parts)

    # -- per-token evidence ---------------------------------------------------------------------
    def _evidence(self, ids, lengths, n_tok: np.ndarray, pos_version: str,
                  tables: list[tuple[int, KeyTable]]) -> list[list[_TokenEvidence]]:
        d, prof = self.decoder, self.decoder.profile
        width = max(1, int(n_tok.max()))
        pk = prf.key_words([d._position_key(pos_version)], d.device)
        keys = [d._level_keys(lv, t.version) for lv, t in tables]  # v3: with the level's seed key
        spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride,
                           width)
        scores, counts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), keys)
        scores, counts = [s.cpu().numpy() for s in scores], counts.cpu().numpy()
        out = []
        for b, n in enumerate(n_tok.tolist()):
            win = np.arange(n) * width // max(n, 1)  # token i's window (one token per window when W >= n)
            cell_seg = counts[b, win].argmax(-1) if n else np.zeros(0, dtype=np.int64)
            out.append([_TokenEvidence(s[b, win], cell_seg if not k.per_value else np.zeros(n, dtype=np.int64))
                        for s, k in zip(scores, keys, strict=True)])
        return out

    # -- decoding -------------------------------------------------------------------------------
    def decode_ids(self, batch: Sequence[Sequence[int]], weights: Sequence[np.ndarray]) -> list[DecodeResult]:
        """`weights[i]`: [n_i, levels held] weights of text i's scored tokens (reference.scored_positions
        order), column l-1 for level l."""
        d = self.decoder
        if not batch:
            return []
        ids, lengths = d.pad(batch)
        n_tok = np.array([len(_positions(x, d.profile.context_width)) for x in batch])
        union = self.statistic == UNION
        for i, w in enumerate(weights):
            shape = w.shape[1:] if union else w.shape
            if (union and (w.ndim != 3 or w.shape[0] % len(self.union_parts))) or shape[0] != n_tok[i] or (
                    n_tok[i] and shape[1] < len(d.tables)):
                raise ValueError(f"text {i}: weights {w.shape} for {n_tok[i]} scored tokens, {len(d.tables)} levels"
                                 + (f", a multiple of {len(self.union_parts)} parts" if union else ""))
        if d.profile.multiplex is not None:
            return self._decode_multiplexed(batch, weights, n_tok)
        w1 = [_level_parts(self.statistic, w, 0, self.union_parts) for w in weights]
        ev1 = {t.version: self._evidence(ids, lengths, n_tok, t.version, [(1, t)]) for t in d.tables[1]}
        level1 = [self._choose(1, [(t, ev1[t.version][i][0]) for t in d.tables[1]], w1[i])
                  for i in range(len(batch))]
        deeper = [lv for lv in sorted(d.tables) if lv > 1]
        lts = [(lv, t) for lv in deeper for t in d.tables[lv]]
        deep: list[list[tuple[KeyTable, Attribution]]] = [[None] * len(batch) for _ in deeper]  # type: ignore[list-item]
        for v in dict.fromkeys(t.version for t, _ in level1) if deeper else ():
            group = [i for i, (t, _) in enumerate(level1) if t.version == v]
            sel = torch.tensor(group)
            evs = self._evidence(ids[sel], lengths[sel], n_tok[group], v, lts)
            for g, i in enumerate(group):
                j = 0
                for k, lv in enumerate(deeper):
                    per_version = []
                    for t in d.tables[lv]:
                        per_version.append((t, evs[g][j]))
                        j += 1
                    parts = _level_parts(self.statistic, weights[i], lv - 1, self.union_parts)
                    deep[k][i] = self._choose(lv, per_version, parts)
        results = []
        for i, (t1, att1) in enumerate(level1):
            seg = np.bincount(ev1[t1.version][i][0].cell, minlength=d.profile.segments).tolist()
            levels = [d._level_result(1, t1, att1, seg, batch[i])]
            for k, lv in enumerate(deeper):
                t, att = deep[k][i]
                levels.append(d._level_result(lv, t, att, seg, batch[i]))
            n_scored = int(n_tok[i])
            watermarked, log_p = text_verdict(levels, n_scored, d.alpha)
            results.append(DecodeResult(
                watermarked=watermarked, p_value=stats.to_p(log_p),
                log10_p_value=_log10(log_p), key_version=levels[0].key_version, tokens_scored=n_scored,
                levels=levels, flags=text_flags(levels), spec_version=d.profile.spec_version, scoring=self.scoring))
        return results

    def _decode_multiplexed(self, batch: Sequence[Sequence[int]], weights: Sequence[np.ndarray],
                            n_tok: np.ndarray) -> list[DecodeResult]:
        """Spec v5: each level weighs only the positions it reads under a hypothesis (engine/multiplexed.py); the
        tries are (version, hypothesis) pairs, the best one Bonferroni-corrected for all of them. A level's
        regions are over its own read positions, so prefixes and suffixes cut its own evidence."""
        d = self.decoder
        prof = d.profile
        mx = prof.multiplex
        assert mx is not None
        ids, lengths = d.pad(batch)
        ev1 = {t.version: multiplexed.text_evidence(d, ids, lengths, batch, t.version, [(1, t)]) for t in d.tables[1]}
        results = []
        for i in range(len(batch)):
            def choose(lv: int, per_version: list[tuple[KeyTable, multiplexed.TextEvidence, int]], i: int = i):
                parts = _level_parts(self.statistic, weights[i], lv - 1, self.union_parts)
                best = None
                tries = len(per_version) * len(mx.hypotheses)
                for t, ev, j in per_version:
                    for hyp in mx.hypotheses:
                        read = multiplexed.levels_read(mx, hyp, ev.positions, ev.lanes, prof.depth) == lv
                        if not read.any():  # nothing to read under this hypothesis: it is still counted in `tries`
                            continue
                        tev = _TokenEvidence(ev.x[j][read][:, None, :], np.zeros(int(read.sum()), dtype=np.int64))
                        sub = [(st, w[read]) for st, w in parts]
                        full, regions, basis = _weighted_regions(tev, sub, prof.windows, True)
                        if best is None or full.level_lp < best[1].level_lp:
                            best = (t, full, regions, basis, tev, sub, ev.positions[read].tolist())
                if best is None:
                    return per_version[0][0], unscored(), []
                t, full, regions, basis, tev, sub, read_pos = best
                att = _attribute(full, regions, basis, tev, sub, prof.windows, True, tries, d.alpha,
                                 prof.levels[lv - 1].key_bits)
                return t, att, read_pos

            t1, att1, pos1 = choose(1, [(t, ev1[t.version][i], 0) for t in d.tables[1]])
            levels = [d._level_result(1, t1, att1, [len(pos1)], batch[i], pos1)]
            deeper = [lv for lv in sorted(d.tables) if lv > 1]
            if deeper:
                lts = [(lv, t) for lv in deeper for t in d.tables[lv]]
                sel = torch.tensor([i])
                ev = multiplexed.text_evidence(d, ids[sel], lengths[sel], [batch[i]], t1.version, lts)[0]
                for lv, per_version in multiplexed.deeper_tries(d, deeper, ev):
                    t, att, pos = choose(lv, per_version)
                    levels.append(d._level_result(lv, t, att, [len(pos)], batch[i], pos))
            n_scored = int(n_tok[i])
            watermarked, log_p = text_verdict(levels, n_scored, d.alpha)
            results.append(DecodeResult(
                watermarked=watermarked, p_value=stats.to_p(log_p), log10_p_value=_log10(log_p),
                key_version=levels[0].key_version, tokens_scored=n_scored, levels=levels, flags=text_flags(levels),
                spec_version=prof.spec_version, scoring=self.scoring))
        return results

    def _choose(self, lv: int, per_version: list[tuple[KeyTable, _TokenEvidence]],
                parts: Parts) -> tuple[KeyTable, Attribution]:
        """The attribution at the version with the smallest whole-text weighted level p-value."""
        prof = self.decoder.profile
        level = prof.levels[lv - 1]
        best = None
        for t, ev in per_version:
            full, regions, basis = _weighted_regions(ev, parts, prof.windows, level.per_value)
            if best is None or full.level_lp < best[1].level_lp:
                best = (t, full, regions, basis, ev)
        assert best is not None
        t, full, regions, basis, ev = best
        att = _attribute(full, regions, basis, ev, parts, prof.windows, level.per_value, len(per_version),
                         self.decoder.alpha, level.key_bits)
        return t, att


def _positions(ids: Sequence[int], h: int) -> list[int]:
    from verifier.engine.reference import scored_positions

    return scored_positions(list(ids), h)


def _weighted_regions(ev: _TokenEvidence, parts: Parts, windows: int, per_value: bool):
    """The whole-text region and the 2(W-1) prefix/suffix regions as attribution `_Region`s (all regions'
    sums in one matrix product per part, all their tails in one saddlepoint call per part), and per region and
    cell the part whose tail named the winner ([R, cells]; all 0 with one part).

    With several parts (UNION) a candidate's tail is the smallest of its parts' tails times their number: a
    union bound, so still a valid p-value per candidate, independent across candidates as each part is. The
    best two candidates of that combined tail are among each part's own best two, so only those are tailed."""
    n, cells, c = ev.x.shape
    win = np.arange(n) * windows // max(n, 1)
    bounds = [(0, windows)] + [(0, j) for j in range(1, windows)] + [(j, windows) for j in range(1, windows)]
    if windows == 1:
        bounds = bounds[:1]
    r = len(bounds)
    member = np.array([(win >= lo) & (win < hi) for lo, hi in bounds], dtype=np.float64)  # [R, n]
    onehot = (ev.cell[:, None] == np.arange(cells)[None, :]).astype(np.float64)  # [n, cells]
    cnt = np.rint(member @ onehot).astype(np.int64)  # [R, cells]
    k = min(2, c)
    sums, wmats, tops = [], [], []
    for statistic, w in parts:
        x = _statistic_evidence(statistic, ev.x) * onehot[:, :, None]  # a token's evidence counts in its cell only
        s = (member @ (w[:, None, None] * x).reshape(n, cells * c)).reshape(r, cells, c)
        sums.append(s)
        wmats.append((member[:, None, :] * onehot.T[None] * w[None, None, :]).reshape(r * cells, n))
        tops.append(np.argsort(-s, axis=2, kind="stable")[..., :k])  # [R, cells, k]
    cand = np.concatenate(tops, axis=2)  # [R, cells, m]
    m = cand.shape[2]
    tails = np.stack([
        _statistic_log_tail(statistic, np.repeat(wm, m, axis=0),
                            np.take_along_axis(s, cand, axis=2).reshape(-1)).reshape(r, cells, m)
        for (statistic, _), s, wm in zip(parts, sums, wmats, strict=True)])  # [parts, R, cells, m]
    comb = np.minimum(tails.min(axis=0) + math.log(len(parts)), 0.0)
    # one part: its own order (sums; a tail's last-digit jitter never reorders); several: the combined tails
    first = np.argmin(comb, axis=2)[..., None] if len(parts) > 1 else np.zeros((r, cells, 1), dtype=np.int64)
    winner = np.take_along_axis(cand, first, axis=2)
    other = np.where(cand == winner, np.inf, comb)
    second = np.argmin(other, axis=2)[..., None]
    lsf1 = np.take_along_axis(comb, first, axis=2)[..., 0]
    lsf2 = np.take_along_axis(other, second, axis=2)[..., 0]
    runner = np.where(np.isfinite(lsf2), np.take_along_axis(cand, second, axis=2)[..., 0], winner[..., 0])
    basis = np.argmin(np.take_along_axis(tails, np.broadcast_to(first[None], (len(parts), r, cells, 1)),
                                         axis=3)[..., 0], axis=0)  # [R, cells]
    scores = np.take_along_axis(np.stack(sums), basis[None, :, :, None].repeat(c, axis=3), axis=0)[0]
    live = cnt > 0
    lp1 = np.where(live, weighted.log_max_tail(lsf1, c), 0.0)
    lp2 = np.where(live & np.isfinite(lsf2), weighted.log_max_tail(np.where(np.isfinite(lsf2), lsf2, 0.0), c - 1),
                   0.0) if c > 1 else np.zeros((r, cells))
    rows = []
    for i, (lo, hi) in enumerate(bounds):
        level_lp = stats.log_fisher([float(x) for x, ok in zip(lp1[i], live[i], strict=True) if ok])
        rows.append(_Region(lo, hi, scores[i], cnt[i].tolist(), winner[i, :, 0].tolist(), lp1[i].tolist(),
                            lp2[i].tolist(), level_lp, int(runner[i, 0])))
    return rows[0], rows[1:], basis


def _attribute(full: _Region, regions: list[_Region], basis: np.ndarray, ev: _TokenEvidence, parts: Parts,
               windows: int, per_value: bool, versions: int, alpha: float, bits: int) -> Attribution:
    """engine/attribution's decision for one text from weighted regions (decide_batch's per-text steps)."""
    log_v = math.log(max(versions, 1))
    log_alpha = math.log(alpha)
    level_lp = min(0.0, full.level_lp + log_v)
    verdict = gate(full.tokens, level_lp, log_alpha, windows)
    if verdict is not None:
        return verdict
    opened = opened_level(level_lp, regions, windows, log_v, log_alpha)
    if opened is None:
        return absent(level_lp, log_alpha)
    att, source = decide_value(full, regions, windows, per_value, log_v, opened, log_alpha, bits)
    if source is not None:
        row = next(i for i, reg in enumerate([full, *regions]) if reg is source)
        eq = _gamma_equivalent_scores(source, ev, [parts[j] for j in basis[row]], windows)
        n, winners = np.array([source.n]), np.array([source.winners])
        conf, marg = posterior_batch(eq[None], n, winners)
        att.confidence, att.bit_confidence = float(conf[0]), _bit_confidence(marg, n, winners, bits)[0]
    if all(k > 0 for k in full.n):
        v = 0
        for x in full.winners:
            v = (v << bits) | x
        att.most_likely = v
    return att


def _gamma_equivalent_scores(r: _Region, ev: _TokenEvidence, cell_parts: Parts, windows: int) -> np.ndarray:
    """[cells, C]: each candidate's weighted sum as the equal-weight (Gamma(n, 1)) score with the same tail,
    for the confidence model; tails interpolated on a grid of _GRID points per cell. `cell_parts[k]`: the
    (statistic, weights) cell k's sums `r.scores[k]` are of (with UNION, the part that named the winner)."""
    n_tok = ev.x.shape[0]
    win = np.arange(n_tok) * windows // max(n_tok, 1)
    inr = (win >= r.lo) & (win < r.hi)
    out = np.zeros_like(r.scores)
    for k, cnt in enumerate(r.n):
        if cnt == 0:
            continue
        statistic, w = cell_parts[k]
        wk = np.where(inr & (ev.cell == k), w, 0.0)
        if not (wk > 0).any():
            continue
        s = r.scores[k]
        if statistic == LINEAR:  # sums > 0
            grid = np.linspace(max(float(s.min()), 1e-9), float(s.max()), _GRID)
        else:  # sums of w log U < 0
            grid = np.linspace(float(s.min()), min(float(s.max()), -1e-9), _GRID)
        lsf = _statistic_log_tail(statistic, np.broadcast_to(wk, (_GRID, wk.size)), grid)
        out[k] = weighted.gamma_equivalent(cnt, np.interp(s, grid, lsf))
    return out
