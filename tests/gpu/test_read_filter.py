"""Spec v5's read filter in the evidence kernel (gpu/scoring.py `ReadFilter`): only the positions one level reads
under one hypothesis are scored, windows by rank among them, counts of them only. Against the pure-Python
reference (verifier/engine/reference.py `v5_lane`, `v5_level`, `v5_token_evidence`): C bit for bit, torch within
1e-12, Triton under its CPU interpreter within 1e-12 (own process)."""

from __future__ import annotations

import random

import pytest
import torch

from gpu import cpu_kernel, prf
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys, ReadFilter, ScoringSpec
from tests.helpers.triton_interpreter import assert_passes_interpreted
from verifier.engine import reference as R

H, VOCAB = 3, 600
# (front_tokens, front_public, public, depth): the shipped shape (front all public), a 3-level one, no front
SHAPES = [(50, 100, 50, 2), (30, 60, 20, 3), (0, 40, 40, 2)]


def _key(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(16))


def batch() -> tuple[list[list[int]], bytes, list[tuple[bytes, list[bytes]]]]:
    """Rows of different lengths: repeated contexts (a small alphabet, a repeated half), shorter than the
    front, too short to score anything, empty; a position key and two seeded tables (level key, value keys)."""
    rng = random.Random(11)
    half = [rng.randrange(VOCAB) for _ in range(40)]
    rows = [
        [rng.randrange(VOCAB) for _ in range(120)],
        half + half + [rng.randrange(VOCAB) for _ in range(10)],  # the second half's contexts repeat
        [rng.randrange(5) for _ in range(90)],  # many repeated contexts
        [rng.randrange(VOCAB) for _ in range(20)],  # shorter than the front
        [rng.randrange(VOCAB) for _ in range(H)],  # nothing scored
        [],
        [rng.randrange(VOCAB) for _ in range(61)],
    ]
    tables = [(_key(rng), [_key(rng) for _ in range(c)]) for c in (37, 5)]
    return rows, _key(rng), tables


def reference(rows, pos_key, level_key, value_keys, rf: ReadFilter, windows: int):
    """Per row: [W][C] sums (sequential in text order) and [W][100] counts over the positions `rf` keeps."""
    out = []
    for ids in rows:
        kept = []
        for t, lane, ev in R.v5_token_evidence(ids, H, pos_key, level_key, value_keys):
            pct = rf.public if rf.excerpt or t >= rf.front_tokens else rf.front_public
            if R.v5_level(lane, pct, rf.depth) == rf.level:
                kept.append((lane, ev))
        sums = [[0.0] * len(value_keys) for _ in range(windows)]
        counts = [[0] * 100 for _ in range(windows)]
        for j, (lane, ev) in enumerate(kept):
            w = j * windows // len(kept)
            counts[w][lane] += 1
            for c, x in enumerate(ev):
                sums[w][c] += x
        out.append((sums, counts))
    return out


def filters():
    for front, front_public, public, depth in SHAPES:
        for level in range(1, depth + 1):
            for excerpt in (False, True):
                yield ReadFilter(front, front_public, public, depth, level, excerpt)


def check(backend: str, windows=(8, 3), exact: bool = False, shapes=None) -> None:
    rows, pos_key, tables = batch()
    lengths = torch.tensor([len(r) for r in rows])
    ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.int64)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, dtype=torch.int64)
    pk = prf.key_words([pos_key])
    keys = [LevelKeys(1, *prf.key_words(v), per_value=True, seed_key=prf.key_words([lk])) for lk, v in tables]
    seen_empty = False
    for rf in filters():
        if shapes is not None and (rf.front_tokens, rf.front_public, rf.public, rf.depth) not in shapes:
            continue
        for w in windows:
            spec = ScoringSpec(H, VOCAB, (), 100, 0, w, rf)
            scores, counts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), keys, backend=backend)
            assert counts.shape == (len(rows), w, 100)
            for (lk, vk), got in zip(tables, scores, strict=True):
                assert got.shape == (len(rows), w, 1, len(vk))
                for b, (sums, cnt) in enumerate(reference(rows, pos_key, lk, vk, rf, w)):
                    want = torch.tensor(sums, dtype=torch.float64)
                    assert counts[b].tolist() == cnt, (backend, rf, w, b)
                    if exact:
                        assert torch.equal(got[b, :, 0], want), (backend, rf, w, b)
                    else:
                        torch.testing.assert_close(got[b, :, 0], want, rtol=1e-12, atol=1e-12)
                    seen_empty |= not any(map(any, cnt)) and len(rows[b]) > H
    assert seen_empty  # some row with scored positions reads nothing at some level: all-zero cells, counts 0


def _backends() -> list[str]:
    return ["torch", *(["native"] if cpu_kernel.available() else [])]


@pytest.mark.parametrize("backend", _backends())
def test_read_filter_matches_the_reference(backend):
    check(backend, exact=backend == "native")


def test_read_filter_is_the_per_token_evidence_summed_on_the_host():
    """The filter's windows hold the same sums as per-token evidence (one window per scored token) summed over
    the kept tokens in text order: the path decoding took before (bit for bit on C)."""
    if not cpu_kernel.available():
        pytest.skip("no C kernel")
    rows, pos_key, tables = batch()
    pk = prf.key_words([pos_key])
    (lk, vk) = tables[0]
    keys = [LevelKeys(1, *prf.key_words(vk), per_value=True, seed_key=prf.key_words([lk]))]
    for ids in rows[:3]:
        n = len(R.scored_positions(ids, H))
        x = torch.tensor([ids])
        per, cnt = segment_scores(x, torch.tensor([len(ids)]), ScoringSpec(H, VOCAB, (), 100, 0, n),
                                  (pk[0][0], pk[1][0]), keys)
        lanes = cnt[0].argmax(-1)
        pos = torch.tensor(R.scored_positions(ids, H))
        for rf in filters():
            keep = rf.keep(pos, lanes)
            got, _ = segment_scores(x, torch.tensor([len(ids)]), ScoringSpec(H, VOCAB, (), 100, 0, 8, rf),
                                    (pk[0][0], pk[1][0]), keys)
            m = int(keep.sum())
            want = torch.zeros(8, len(vk), dtype=torch.float64)
            for j, row in enumerate(per[0][0, keep, 0]):
                want[j * 8 // m] += row
            assert torch.equal(got[0][0, :, 0], want)


def test_read_filter_settings_are_checked():
    with pytest.raises(ValueError):
        ScoringSpec(H, VOCAB, (), 4, 0, 8, ReadFilter(50, 100, 50, 2, 1))  # lanes are 100 segments
    with pytest.raises(ValueError):
        ReadFilter(50, 100, 50, 2, 3)  # no level 3 in a 2-level profile
    with pytest.raises(ValueError):
        ReadFilter(50, 101, 50, 2, 1)
    spec = ScoringSpec(H, VOCAB, (), 100, 0, 8, ReadFilter(50, 100, 50, 2, 1, True))
    assert hash(spec) == hash(ScoringSpec(H, VOCAB, (), 100, 0, 8, ReadFilter(50, 100, 50, 2, 1, True)))


@pytest.mark.slow
def test_read_filter_triton_in_interpreter():
    """The Triton decode kernel with the read filter on the CPU through TRITON_INTERPRET=1 (own process)."""
    pytest.importorskip("triton")
    code = ("import sys; sys.path.insert(0, '.'); import tests.gpu.test_read_filter as t\n"
            "t.check('triton', windows=(8,), shapes=[(50, 100, 50, 2), (30, 60, 20, 3)])\nprint('ok')\n")
    assert_passes_interpreted(code, timeout=900)
