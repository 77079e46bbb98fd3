"""The one-value test: "was this text made with value v of level l?" (`expect` in a verify request).

Decoding searches all 2^b values of a level, so its p-value pays for the maximum over them; a caller who asks
about one value (a moderator: "is this from model 37?") gets the tail of that value's own score instead:
p = Q(n, S_v), the smallest over the key versions held times their number. Under the null (text not made
with v: human text or another value) v's evidence is pure Exp(1) per scored token (spec 13.3), so the
p-value is uniform (tests/engine/test_expected.py); with the mark it is far smaller than the search's.

Per-value levels only (spec v3's public level, v2's private ones): a segmented level's value shares its
segment values with others (4 of them per 2-bit segment), so another model's text would carry evidence for
part of v and the test would not be one of v alone. The kernel runs with v's key only, so the test costs a
small fraction of a decode. Deeper levels are scored under the text's level-1 position key: the
version its decode named, else every level-1 version (counted in the correction). Spec v5: v's evidence is
summed over the positions its level reads under each hypothesis (engine/multiplexed.py), the hypotheses counted
in the correction as versions are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from gpu import prf
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine import multiplexed, stats
from verifier.engine.decoder import Decoder


class NotOneValue(ValueError):
    """The level is segmented: no one-value test (see the module docstring)."""


def expected_log_p(decoder: Decoder, batch: Sequence[Sequence[int]], level: int, value: int,
                   position_versions: Sequence[str | None]) -> np.ndarray:
    """Per text, log p of the one-value test (versions corrected). `position_versions[i]`: the level-1 version
    whose position key scores text i (its decode's), None for every level-1 version."""
    if level not in decoder.tables:
        raise ValueError(f"level {level} is not held by this decoder")
    prof = decoder.profile
    if not prof.levels[level - 1].per_value:
        raise NotOneValue(f"level {level} of profile {prof.name!r} is segmented: `expect` needs a per-value level "
                          "(spec v3's public level, v2's private levels)")
    ids, lengths = decoder.pad(batch)
    spec = ScoringSpec(prof.context_width, prof.vocab_size, prof.schedule, prof.segments, prof.routing_stride, 1)
    all_pos = [t.version for t in decoder.tables[1]]
    best = np.zeros(len(batch))
    tried = np.zeros(len(batch))
    for pos_version in all_pos:
        rows = [i for i, v in enumerate(position_versions) if v is None or v == pos_version]
        if not rows:
            continue
        sel = torch.tensor(rows, device=ids.device)
        pk = prf.key_words([decoder._position_key(pos_version)], decoder.device)
        for table in decoder.tables[level]:
            if level == 1 and table.version != pos_version:
                continue  # level 1's keys and its position key are one version
            full = decoder._level_keys(level, table.version, every_value=True)
            if not 0 <= value < full.candidates:
                raise ValueError(f"level {level} has values 0..{full.candidates - 1}, not {value}")
            one = slice(value, value + 1)  # v's key alone: the kernel scores one candidate
            keys = LevelKeys(level, full.k0[one], full.k1[one], per_value=True, seed_key=full.seed_key)
            if prof.multiplex is not None:
                lp_h = _multiplexed_log_p(decoder, ids[sel], lengths[sel], [batch[i] for i in rows], pos_version,
                                          level, keys)
                best[rows] = np.minimum(best[rows], lp_h.min(0))
                tried[rows] += lp_h.shape[0]
                continue
            scores, counts = segment_scores(ids[sel], lengths[sel], spec, (pk[0][0], pk[1][0]), [keys])
            own = scores[0][:, 0, 0, 0].cpu().numpy()  # [B']
            n = counts[:, 0].sum(-1).cpu().numpy()
            lp = np.where(n > 0, stats.log_gamma_sf_array(np.maximum(n, 1), own), 0.0)
            best[rows] = np.minimum(best[rows], lp)
            tried[rows] += 1
    return np.minimum(0.0, best + np.log(np.maximum(tried, 1)))


def _multiplexed_log_p(decoder: Decoder, ids, lengths, batch: Sequence[Sequence[int]], pos_version: str,
                       level: int, keys: LevelKeys) -> np.ndarray:
    """[hypotheses, B] log Q(n, S_v) of v's evidence over the positions `level` reads under each hypothesis."""
    prof = decoder.profile
    mx = prof.multiplex
    assert mx is not None
    evs = multiplexed.text_evidence(decoder, ids, lengths, batch, pos_version, [], keys=[keys])
    out = np.zeros((len(mx.hypotheses), len(batch)))
    for h, hyp in enumerate(mx.hypotheses):
        for b, ev in enumerate(evs):
            read = multiplexed.levels_read(mx, hyp, ev.positions, ev.lanes, prof.depth) == level
            n = int(read.sum())
            if n:
                out[h, b] = stats.log_gamma_sf_array(np.array([n]), np.array([ev.x[0][read, 0].sum()]))[0]
    return out


def expected_results(decoder: Decoder, batch: Sequence[Sequence[int]], asked: dict[int, int],
                     level1_versions: Sequence[str | None], alpha: float, fields_of) -> list[list[dict]]:
    """Per text, one entry per asked level: {"level", "fields", "p_value", "log10_p_value", "matches"}.
    `fields_of(level, value)` names the value's fields (engine/payload.value_fields)."""
    out: list[list[dict]] = [[] for _ in batch]
    for level, value in sorted(asked.items()):
        pos = [None] * len(batch) if level == 1 else list(level1_versions)
        lp = expected_log_p(decoder, batch, level, value, pos)
        for i, x in enumerate(lp.tolist()):
            out[i].append({"level": level, "fields": fields_of(level, value), "p_value": stats.to_p(x),
                           "log10_p_value": x / math.log(10.0), "matches": x <= math.log(alpha)})
    return out


__all__ = ["NotOneValue", "expected_log_p", "expected_results"]
