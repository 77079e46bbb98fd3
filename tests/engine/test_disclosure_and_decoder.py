"""Selective disclosure (Theorem 2), decoder outputs, key versions and calibration on a synthetic LM."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from gpu import prf
from gpu.partition import routing_paths
from tests.helpers.keys import fixed_keyset, make_keyset
from tests.helpers.synthetic import bit_errors, generate
from verifier.engine.decoder import DecodeError, Decoder
from verifier.engine.keys import KeySet
from verifier.engine.profile import make_profile

PROFILE = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,))


@pytest.fixture(scope="module")
def corpus():
    ks = make_keyset(PROFILE, 1)
    n = 180  # 180 texts x 12 private bits = 2160 bits
    rng = np.random.default_rng(0)
    payloads = [{"level1": int(rng.integers(4096)), "level2": int(rng.integers(4096))} for _ in range(n)]
    ids = generate(PROFILE, ks, payloads, 200, seed=1)
    return ks, payloads, ids.tolist()


def test_full_keys_decode_both_levels(corpus):
    ks, payloads, ids = corpus
    res = Decoder(PROFILE, {1: [ks.tables[0]], 2: [ks.tables[1]]}).decode_ids(ids)
    ok = [0, 0]
    tot = [0, 0]
    for r, p in zip(res, payloads, strict=True):
        assert r.watermarked and r.p_value < 1e-10
        for lv in (1, 2):
            a, b = bit_errors(PROFILE, lv, r.levels[lv - 1].fields, p)
            ok[lv - 1] += a
            tot[lv - 1] += b
    print(f"\nfull keys: level-1 bit acc {ok[0] / tot[0]:.4f}, level-2 {ok[1] / tot[1]:.4f} over {tot[1]} bits each")
    assert ok[0] / tot[0] > 0.95 and ok[1] / tot[1] > 0.9


def test_public_only_verifier_decodes_private_bits_at_chance(corpus):
    ks, payloads, ids = corpus
    public = Decoder(PROFILE, {1: [ks.tables[0]]})
    res = public.decode_ids(ids)
    assert all(len(r.levels) == 1 for r in res)  # level 2 is never even computed
    # Attack 1: guess level-2 tables (any table not derived from the level-2 master).
    # Its evidence is pure noise: the level is `absent` and nothing is released (v1 released argmax bits).
    guess = make_keyset(PROFILE, 9).tables[1]
    guessed = Decoder(PROFILE, {1: [ks.tables[0]], 2: [guess]}).decode_ids(ids)
    assert all(r.levels[1].status == "absent" and r.levels[1].fields == {"level2": None} for r in guessed)
    assert all(r.levels[1].confidence == 0.0 for r in guessed)
    # The p-values are null ones (research/calibration_foreign_level2.py: uniform over 180,000 such texts).
    # p <= 1e-4 among 180 texts happens in ~2 % of runs, twice in ~2e-4 (seen once in CI), three times in ~1e-6.
    p2 = np.array([r.levels[1].p_value for r in guessed])
    assert (p2 <= 1e-4).sum() <= 2
    assert sps.kstest(p2, "uniform").pvalue > 1e-6  # a false failure in 1e-6 of runs, as the tail bound
    # flagged where the guessed level shows p >= 0.01 (decoder.INCONSISTENT_P): every such text, 0.99 of them
    decoded = [r for r in guessed if r.levels[0].status == "decoded"]
    assert all((r.flags == ["inconsistent-levels"]) == (r.levels[1].p_value >= 0.01) for r in decoded)
    assert sum(r.flags == ["inconsistent-levels"] for r in decoded) >= 0.9 * len(decoded)
    # Attack 2: public verifier knows positions and paths; majority vote of the within-chunk index.
    ok = tot = 0
    pk0, pk1 = prf.key_words([ks.position])
    for row, p in zip(ids, payloads, strict=True):
        t = torch.tensor(row)
        ctx = t.unfold(0, 4, 1)[:-1]
        seg = prf.position_of(*prf.prf_seed(pk0[0], pk1[0], ctx), PROFILE.segments)
        within = routing_paths(t[4:], PROFILE.vocab_size, PROFILE.schedule)[:, 1] % 4
        for k in range(PROFILE.segments):
            vals = within[seg == k]
            guess_v = int(torch.bincount(vals, minlength=4).argmax()) if len(vals) else 0
            true_v = (p["level2"] >> (2 * (PROFILE.segments - 1 - k))) & 3
            ok += (guess_v >> 1 == true_v >> 1) + ((guess_v & 1) == (true_v & 1))
            tot += 2
    print(f"public-only, majority vote of within-chunk index: private bit acc {ok / tot:.4f} over {tot} bits")
    # Without a leak the guesses are independent of the uniformly drawn private values, so each guessed bit is
    # right with probability 1/2, independently: the bound is 5 standard deviations (0.054 over 2160 bits; a
    # false failure in ~6e-7 of runs; the old bound of 0.03 was 2.8 and failed a clean-clone CI run at 0.4694).
    assert abs(ok / tot - 0.5) <= 5 * 0.5 / math.sqrt(tot)


def test_null_pvalues_uniform_and_no_false_detection():
    ks = make_keyset(PROFILE, 2)
    rng = np.random.default_rng(5)
    texts = rng.integers(0, PROFILE.vocab_size, size=(400, 200)).tolist()
    res = Decoder(PROFILE, {1: [ks.tables[0]], 2: [ks.tables[1]]}).decode_ids(texts)
    p = np.array([r.p_value for r in res])
    print(f"\nnull: KS p {sps.kstest(p, 'uniform').pvalue:.3f}, detections at 1e-3: {(p < 1e-3).sum()} / {len(p)}")
    assert sps.kstest(p, "uniform").pvalue > 1e-6  # fresh keys every run: a false failure in 1e-6 of runs
    # Bin(400, 1e-3): P[X >= 4] < 2e-3.
    assert (p < 1e-3).sum() <= 3


def test_short_text_reports_undecoded_segments_not_nan():
    ks = make_keyset(PROFILE, 3)
    ids = generate(PROFILE, ks, [{"level1": 5, "level2": 9}], 8, seed=3).tolist()
    (r,) = Decoder(PROFILE, {1: [ks.tables[0]], 2: [ks.tables[1]]}).decode_ids(ids)
    assert r.tokens_scored == 4
    lv = r.levels[0]
    assert lv.undecoded_segments and lv.fields == {"level1": None}
    assert None in lv.bit_confidence
    text = json.dumps(r.to_dict(), allow_nan=False)  # no NaN anywhere
    assert "NaN" not in text
    (empty,) = Decoder(PROFILE, {1: [ks.tables[0]]}).decode_ids([[1, 2, 3]])
    assert empty.tokens_scored == 0 and not empty.watermarked and empty.p_value == 1.0
    assert empty.levels[0].status == "undecodable" and "no scored tokens" in empty.levels[0].reason


def test_rotated_versions_report_matching_version_with_correction():
    # fixed key sets: with fresh ones a level-1 segment of a 200-token text was short of evidence in ~1 % of runs
    old, new = fixed_keyset(PROFILE, 1), fixed_keyset(PROFILE, 2)
    new = KeySet(tuple(type(t)(t.level, f"l{t.level}-v2", t.entries, t.position) for t in new.tables))
    ids_old = generate(PROFILE, old, [{"level1": 77, "level2": 3000}], 200, seed=4).tolist()
    ids_new = generate(PROFILE, new, [{"level1": 1234, "level2": 42}], 200, seed=5).tolist()
    both = {1: [old.tables[0], new.tables[0]], 2: [old.tables[1], new.tables[1]]}
    r_old, r_new = Decoder(PROFILE, both).decode_ids(ids_old + ids_new)
    assert r_old.key_version == "l1-v1" and r_new.key_version == "l1-v2"
    assert [lv.key_version for lv in r_new.levels] == ["l1-v2", "l2-v2"]
    assert r_old.levels[1].fields == {"level2": 3000} and r_new.levels[0].fields == {"level1": 1234}
    (single,) = Decoder(PROFILE, {1: [new.tables[0]], 2: [new.tables[1]]}).decode_ids(ids_new)
    assert r_new.levels[0].versions_tried == 2
    assert math.isclose(r_new.levels[0].log10_p_value, min(0.0, single.levels[0].log10_p_value + math.log10(2)))



def test_a_level_without_evidence_names_no_key_version():
    """With two versions held, the smaller of two null p-values would name a version by chance (CI saw an
    `absent` level 2 of a new text reported as `l2-v1`): no significant evidence, no version."""
    old, new, other = make_keyset(PROFILE, 1), make_keyset(PROFILE, 2), make_keyset(PROFILE, 9)
    both = {1: [old.tables[0], new.tables[0]], 2: [old.tables[1], new.tables[1]]}
    rng = np.random.default_rng(11)
    plain = rng.integers(0, PROFILE.vocab_size, size=(40, 200)).tolist()
    # level 1 under l1-v2, level 2 under a key the service does not hold: level 2 has no evidence
    foreign = KeySet((new.tables[0], other.tables[1]))
    # 300 tokens: at 200, a rare fresh key set left a level-1 segment short of its own evidence (CI, 2026-11-28)
    ids = generate(PROFILE, foreign, [{"level1": 1234, "level2": 42}], 300, seed=6).tolist()
    # level 2 under l2-v2, level-1 entries foreign (with l1-v2's position key): only level 2 has evidence
    t1 = new.tables[0]
    deep = KeySet((type(t1)(1, "l1-v2", other.tables[0].entries, t1.position), new.tables[1]))
    ids += generate(PROFILE, deep, [{"level1": 99, "level2": 42}], 200, seed=7).tolist()
    *nulls, half, deep_only = Decoder(PROFILE, both).decode_ids(plain + ids)
    for r in nulls:
        lv1, lv2 = r.levels
        assert (lv2.key_version is None) == (lv2.p_value > 1e-4), lv2
        assert (lv1.key_version is None) == (lv1.p_value > 1e-4), r
        assert r.key_version == lv1.key_version
    assert sum(r.key_version is None for r in nulls) >= 38  # alpha = 1e-4 per level, two versions
    assert half.key_version == "l1-v2" and half.levels[0].fields == {"level1": 1234}
    assert half.levels[1].status == "absent" and half.levels[1].key_version is None
    assert half.to_dict()["levels"][1]["key_version"] is None
    # the text is significant through level 2 alone: level 2 names its version, level 1 none (level 2's
    # evidence stays significant under either level-1 version's position key: it supports neither)
    assert deep_only.levels[0].p_value > 1e-4 and deep_only.watermarked, deep_only
    assert deep_only.key_version is None and deep_only.levels[0].key_version is None
    assert deep_only.levels[1].key_version == "l2-v2"

def test_decoder_input_errors():
    ks = make_keyset(PROFILE, 4)
    with pytest.raises(DecodeError, match="no level-1"):
        Decoder(PROFILE, {})
    with pytest.raises(DecodeError, match="without gaps"):
        Decoder(PROFILE, {1: [ks.tables[0]], 3: [ks.tables[1]]})
    dec = Decoder(PROFILE, {1: [ks.tables[0]]})
    with pytest.raises(DecodeError, match="outside the profile vocabulary"):
        dec.decode_ids([[1, 2, 3, 4, 5, 99999]])

    class Tok:
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[1] * 5 for _ in texts]}

    with pytest.raises(DecodeError, match="empty"):
        dec.decode_texts(["  "], Tok())


def test_confidence_is_high_when_marked_and_low_when_not(corpus):
    ks, _payloads, ids = corpus
    r = Decoder(PROFILE, {1: [ks.tables[0]], 2: [ks.tables[1]]}).decode_ids(ids[:20])
    assert np.mean([x.levels[0].confidence for x in r]) > 0.8
    wrong = make_keyset(PROFILE, 8)
    rw = Decoder(PROFILE, {1: [wrong.tables[0]]}).decode_ids(ids[:20])
    # alpha = 1e-4 is the designed false-positive rate per text (calibrated: 2 of 21,600 such texts): one of 20
    # is flagged in 2e-3 of runs (this failed 1 of 8 local runs), two in 2e-7. Nothing is released either way.
    assert sum(x.watermarked for x in rw) <= 1
    assert all(x.levels[0].status == "absent" and x.levels[0].confidence == 0.0 for x in rw)
    assert all(b is None for x in rw for b in x.levels[0].bit_confidence)


def test_a_destroyed_version_does_not_hide_evidence_under_a_held_one():
    """`undecodable` (the version that made the text may be gone) only where the held versions show no evidence:
    short texts whose level 1 is significant but `detected` (value withheld: weak segments) were made with a held
    version."""
    ks = make_keyset(PROFILE, 5)
    short = generate(PROFILE, ks, [{"level1": 77, "level2": 5}] * 20, 30, seed=30).tolist()
    plain = np.random.default_rng(12).integers(0, PROFILE.vocab_size, size=(20, 30)).tolist()
    gone = "key version(s) l1-v0 destroyed on 2026-01-01; text made with them can no longer be decoded"
    res = Decoder(PROFILE, {1: [ks.tables[0]]}, unavailable={1: gone}).decode_ids(short + plain)
    weak = [r.levels[0] for r in res[:20] if r.levels[0].p_value <= 1e-4 and r.levels[0].status != "decoded"]
    assert len(weak) >= 10
    for lv in weak:
        assert lv.status == "detected" and lv.key_version == ks.tables[0].version and lv.reason != gone, lv
        assert lv.reason.startswith("value withheld") and lv.fields == {"level1": None}
    # Plain text: p <= 1e-4 (`detected` under the held version) is the designed false-positive rate, calibrated
    # (209 of 2,000,000 such 30-token texts under fresh keys): one of 20 in 2e-3 of runs (CI met it once), two in
    # 2e-7. Such a text still releases no value.
    flagged = 0
    for r in res[20:]:
        lv = r.levels[0]
        if lv.status == "undecodable":
            assert (lv.reason, lv.key_version) == (gone, None), lv
        else:
            flagged += 1
            assert lv.status == "detected" and lv.p_value <= 1e-4 and lv.fields == {"level1": None}, lv
    assert flagged <= 1


def test_no_value_on_a_text_not_called_watermarked():
    """A deeper level whose own p-value passes alpha while the text's does not (level 1 without evidence, as on
    a human text at 50 tokens: level 2 p = 3.5e-5, the text's 3.2e-4) is `detected`, its value withheld:
    no result names a user on a text it calls unmarked. The same level on a longer text is released."""
    prof = make_profile((2, 2), 24, vocab_size=4000, schedule=(20,), spec_version=2)  # level 2 per value, as v3
    held, other = make_keyset(prof, 1), make_keyset(prof, 9)
    t1 = held.tables[0]
    # level-1 entries the service does not hold (its position key kept): only level 2 carries evidence
    deep = KeySet((type(t1)(1, t1.version, other.tables[0].entries, t1.position), held.tables[1]))
    rng = np.random.default_rng(4)
    pays = [{"level1": int(rng.integers(4096)), "level2": int(rng.integers(4096))} for _ in range(440)]
    ids = generate(prof, deep, pays, 100, seed=8).tolist()
    texts = [x[: 12 + i % 30] for i, x in enumerate(ids[:400])] + ids[400:]
    res = Decoder(prof, {1: [held.tables[0]], 2: [held.tables[1]]}).decode_ids(texts)
    withheld = 0
    for r in res:
        if not r.watermarked:
            assert all(v is None for lv in r.levels for v in lv.fields.values()), r
            assert all(lv.confidence == 0.0 and lv.candidates is None for lv in r.levels)
            lv2 = r.levels[1]
            if lv2.status == "detected":
                assert lv2.p_value <= 1e-4 < r.p_value and lv2.reason.startswith("value withheld")
                withheld += "not called watermarked" in lv2.reason
                assert set(lv2.bit_confidence) == {None}
    assert withheld >= 1  # 11-20 of these 400 short texts in 8 runs (Poisson: none in about 1e-7 of runs)
    long = res[400:]
    assert sum(r.levels[1].status == "decoded" and r.levels[1].fields == {"level2": p["level2"]}
               for r, p in zip(long, pays[400:], strict=True)) >= 30  # 40 of 40 in 8 runs
