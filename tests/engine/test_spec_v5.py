"""Spec v5 (docs/spec.md section 19): position-multiplexed levels.

Frozen vectors (tests/vectors/hero_v5.json, from the pure-Python reference) for lanes, levels, whole-token draws
and per-token evidence; the fused step on every CPU backend against them; decoding: exact values, the excerpt
hypothesis, null calibration, splices, `expect`, model-aware scoring; the draw's unbiasedness over keys."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from gpu import cpu_kernel
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys, ScoringSpec
from gpu.step import SPEC_VERSIONS
from tests.helpers.draws import mass_bins_chi2_pvalue
from tests.helpers.keys import fixed_keyset
from tests.helpers.synthetic import generate
from verifier.engine import multiplexed
from verifier.engine import reference as R
from verifier.engine.decoder import Decoder
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.payload import PayloadError, encode_payload
from verifier.engine.profile import Multiplex, ProfileError, profile_from_dict, resolve_profile

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "hero_v5.json"
V5 = resolve_profile("v5")
# the shipped v5 profile on a small vocabulary: the synthetic LM's texts decode in a fraction of the time
SYN = profile_from_dict({**V5.to_dict(), "name": "v5-syn", "vocab_size": 4000})


@pytest.fixture(scope="module")
def v5():
    return json.loads(VECTORS.read_text())


def _backends() -> list[str]:
    return ["torch", *(["native"] if cpu_kernel.available() else [])]


def _profile(v) -> object:
    segs = v["segments"]
    front, front_public, public = v["multiplex"]
    return profile_from_dict({
        "name": "vec5", "spec_version": 5, "vocab_size": v["vocab_size"], "segments": segs,
        "context_width": v["context_width"],
        "multiplex": {"front_tokens": front, "front_public": front_public, "public": public},
        "levels": [{"bits": b, "fields": [{"name": f"f{i}", "bits": b * segs}]} for i, b in enumerate(v["bits"])],
    })


def test_v5_vectors_lanes_and_levels(v5):
    assert v5["spec_version"] == 5 and 5 in SPEC_VERSIONS and v5["lanes"] == 100
    for case in v5["lane"]:
        pos = bytes.fromhex(case["position_key"])
        assert [R.v5_lane(pos, c) for c in case["contexts"]] == case["lanes"]
    for case in v5["level"]:
        mx = Multiplex(0, case["percent"], case["percent"])
        assert R.v5_level(case["lane"], case["percent"], case["depth"]) == case["level"]
        assert mx.level_of(case["lane"], case["percent"], case["depth"]) == case["level"]
        lv = multiplexed.levels_read(mx, "verbatim", np.array([99]), np.array([case["lane"]]), case["depth"])
        assert lv.tolist() == [case["level"]]


@pytest.mark.parametrize("backend", [None, *_backends()])
def test_v5_generation_step_matches_the_frozen_vectors(v5, backend):
    """The fused step every generation path calls gives the frozen tokens, before and after the front, with 2 and 3
    levels, in float64 and float32."""
    from verifier.engine.fused import make_fused_sampler

    seen_levels = set()
    for v in v5["sample"]:
        prof = _profile(v)
        ks = KeySet(tuple(derive_level_table(bytes.fromhex(m), prof, lv, "t")
                          for lv, m in enumerate(v["masters"], start=1)))
        fs = make_fused_sampler(prof, ks)
        pay = torch.tensor([encode_payload(prof, {f"f{i}": x for i, x in enumerate(v["values"])})])
        for dtype in (torch.float64, torch.float32):
            gen = torch.full((1,), v["generated"], dtype=torch.int64)
            tokens, marks = fs.step(torch.tensor([v["logits"]], dtype=dtype), torch.tensor([v["context"]]), pay, gen,
                                    fs.new_log(1), backend=backend, with_marks=True)
            assert bool(marks.all()) and tokens.tolist() == [v["token"]], (backend, dtype, v["level"])
            assert gen.tolist() == [v["generated"] + 1]
        seen_levels.add(v["level"])
    assert seen_levels == {1, 2, 3}


def test_v5_per_token_evidence_kernels(v5):
    """What each level reads: the evidence kernel (one window per scored token, 100 segments = the lanes) gives
    the reference's lanes and per-token evidence on every CPU backend (C bit for bit, torch within 1e-12)."""
    from gpu import prf

    for v in v5["decode"]:
        ids = v["ids"]
        n = len(v["positions"])
        assert R.scored_positions(ids, v["context_width"]) == v["positions"]
        spec = ScoringSpec(v["context_width"], v["vocab_size"], (), 100, 0, n)
        keys = LevelKeys(1, *prf.key_words([bytes.fromhex(k) for k in v["value_keys"]]), per_value=True,
                         seed_key=prf.key_words([bytes.fromhex(v["level_key"])]))
        pk = prf.key_words([bytes.fromhex(v["position_key"])])
        for backend in ["torch", *(["native"] if cpu_kernel.available() else [])]:
            scores, counts = segment_scores(torch.tensor([ids]), torch.tensor([len(ids)]), spec, (pk[0][0], pk[1][0]),
                                            [keys], backend=backend)
            assert counts[0].argmax(-1).tolist() == v["lanes"]
            got, want = scores[0][0, :, 0], torch.tensor(v["evidence"], dtype=torch.float64)
            assert torch.equal(got, want) if backend == "native" else torch.allclose(got, want, rtol=1e-12, atol=0)


def test_profile_rules_for_multiplexed_levels():
    base = V5.to_dict()
    with pytest.raises(ProfileError, match="needs spec_version 5"):
        profile_from_dict({**resolve_profile("v4").to_dict(), "multiplex": base["multiplex"]})
    with pytest.raises(ProfileError, match="spec v5 needs 'multiplex"):
        profile_from_dict({k: x for k, x in base.items() if k != "multiplex"})
    with pytest.raises(ProfileError, match="unknown key 'front'"):
        profile_from_dict({**base, "multiplex": {"front": 50, "public": 50}})
    with pytest.raises(ProfileError, match="public must be a percent"):
        profile_from_dict({**base, "multiplex": {"front_tokens": 50, "public": 100}})
    with pytest.raises(ProfileError, match="no 'chunks'"):
        profile_from_dict({**base, "levels": [{**base["levels"][0], "chunks": 80}, base["levels"][1]]})
    assert V5.schedule == () and V5.multiplex.hypotheses == ("verbatim", "excerpt")
    assert V5.multiplex.public_percent(49) == 100 and V5.multiplex.public_percent(50) == 50
    uniform = profile_from_dict({**base, "multiplex": {"front_tokens": 0, "public": 55}})
    assert uniform.multiplex.hypotheses == ("verbatim",)


def test_generation_refuses_a_value_not_issued():
    with pytest.raises(PayloadError):
        encode_payload(V5, {"model": 9, "user": 1})


@pytest.fixture(scope="module")
def syn_keys():
    return fixed_keyset(SYN, 5)


@pytest.fixture(scope="module")
def syn_texts(syn_keys):
    rng = random.Random(3)
    pays = [{"model": rng.choice(list(SYN.levels[0].issued)), "user": rng.randrange(4096)} for _ in range(24)]
    return pays, generate(SYN, syn_keys, pays, 160, sigma=1.0, seed=4)


def test_v5_decodes_exact_model_and_user_from_each_levels_own_positions(syn_keys, syn_texts):
    """Level 1 reads the front and half of the rest, level 2 the other half; each names its exact value, and a
    moderator (level 1 only) gets the same level-1 result without computing anything of level 2."""
    pays, ids = syn_texts
    aud = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]}).decode_ids(ids.tolist())
    mod = Decoder(SYN, {1: [syn_keys.tables[0]]}).decode_ids(ids.tolist())
    users = 0
    for a, m, p in zip(aud, mod, pays, strict=True):
        assert a.watermarked and m.watermarked
        assert a.levels[0].fields == m.levels[0].fields == {"model": p["model"]}
        assert a.levels[0].searched == 4 and a.levels[1].searched == 4096
        n1, n2 = a.levels[0].segment_tokens[0], a.levels[1].segment_tokens[0]
        assert n1 + n2 <= a.tokens_scored and n1 > n2  # the front is all public
        users += a.levels[1].fields == {"user": p["user"]}
        assert a.levels[1].fields in ({"user": p["user"]}, {"user": None})
        assert "inconsistent-levels" not in a.flags
    assert users >= 20


def test_v5_excerpt_decodes_through_the_excerpt_hypothesis(syn_keys, syn_texts):
    """A passage from token 60 on: the verbatim hypothesis reads the first 50 text indices as all public, which
    under the excerpt is wrong; the excerpt hypothesis still names both values."""
    pays, ids = syn_texts
    cut = ids[:, 60:].tolist()
    res = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]}).decode_ids(cut)
    models = sum(r.levels[0].fields == {"model": p["model"]} for r, p in zip(res, pays, strict=True))
    users = sum(r.levels[1].fields == {"user": p["user"]} for r, p in zip(res, pays, strict=True))
    assert models >= 20 and users >= 14
    for r, p in zip(res, pays, strict=True):
        assert r.levels[0].fields in ({"model": p["model"]}, {"model": None})
        assert r.levels[1].fields in ({"user": p["user"]}, {"user": None})


def test_v5_null_p_values_are_uniform_and_nothing_is_released(syn_keys):
    """Uniform ids and text made with another key set: both levels' p-values (the best of two hypotheses,
    corrected) are uniform or conservative, none reaches alpha, nothing is released."""
    g = torch.Generator().manual_seed(12)
    human = torch.randint(0, SYN.vocab_size, (150, 80), generator=g).tolist()
    other = generate(SYN, fixed_keyset(SYN, 8, label="other"), [{"model": 1, "user": 7}] * 60, 80,
                           seed=5).tolist()
    res = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]}).decode_ids(human + other)
    for lv in (0, 1):
        p = np.array([r.levels[lv].p_value for r in res])
        assert sps.kstest(p, "uniform", alternative="greater").pvalue > 1e-3  # not too many small p-values
        assert (p <= 1e-3).sum() <= 2
    assert not any(r.watermarked for r in res)
    assert all(lv.fields is None or set(lv.fields.values()) == {None} for r in res for lv in r.levels)


def test_v5_splices_never_name_a_third_value(syn_keys):
    rng = random.Random(9)
    n = 12
    pairs = [rng.sample(list(SYN.levels[0].issued), 2) for _ in range(n)]
    pa = [{"model": a, "user": rng.randrange(4096)} for a, _ in pairs]
    pb = [{"model": b, "user": rng.randrange(4096)} for _, b in pairs]
    a, b = generate(SYN, syn_keys, pa, 160, seed=7), generate(SYN, syn_keys, pb, 160, seed=8)
    res = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]}).decode_ids(
        torch.cat([a[:, :80], b[:, 80:]], dim=1).tolist())
    for r, x, y in zip(res, pa, pb, strict=True):
        for lv, field in ((0, "model"), (1, "user")):
            level = r.levels[lv]
            named = {level.fields[field]} if level.status == "decoded" else set()
            named |= {c["fields"][field] for c in level.candidates or []}
            named |= {s["fields"][field] for s in level.spans or []}
            assert named <= {x[field], y[field]}


def test_v5_one_value_test(syn_keys, syn_texts):
    """`expect` reads v's evidence at its level's positions: the true user far below alpha, another value and
    unmarked text uniform-ish (never below 1e-3 here)."""
    from verifier.engine.expected import expected_log_p

    pays, ids = syn_texts
    d = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]})
    batch = ids[:8].tolist()
    true = [expected_log_p(d, [x], 2, p["user"], [None])[0] for x, p in zip(batch, pays[:8], strict=True)]
    assert sum(lp < math.log(1e-4) for lp in true) >= 6
    wrong = expected_log_p(d, batch, 2, 4095 - pays[0]["user"], [None] * 8)
    assert (wrong > math.log(1e-3)).all()
    g = torch.Generator().manual_seed(2)
    human = torch.randint(0, SYN.vocab_size, (100, 80), generator=g).tolist()
    p = np.exp(expected_log_p(d, human, 1, 2, [None] * 100))
    assert sps.kstest(p, "uniform", alternative="greater").pvalue > 1e-3 and (p <= 1e-3).sum() <= 1


def test_v5_model_aware_decoding_with_generator_probabilities(syn_keys):
    """Model-aware scoring (the weighted decoder) reads each level at its positions, weighted by the token's
    probability; equal weights give the model-free result's values, and null texts stay uncalled."""
    from verifier.engine.weighted_decode import UNION, WeightedDecoder, Weighting

    rng = random.Random(4)
    pays = [{"model": rng.choice([0, 1, 2, 3]), "user": rng.randrange(4096)} for _ in range(6)]
    ids = generate(SYN, syn_keys, pays, 120, seed=11, sigma=1.0).tolist()
    g = torch.Generator().manual_seed(3)
    human = torch.randint(0, SYN.vocab_size, (20, 120), generator=g).tolist()
    d = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]})
    wd = WeightedDecoder(d, statistic=UNION)
    weigh = Weighting(UNION)
    batch = ids + human
    ws = []
    for x in batch:
        n = len(R.scored_positions(x, SYN.context_width))
        ws.append(weigh.for_text(np.full((n, 2), 0.3), x, SYN.context_width))
    res = wd.decode_ids(batch, ws)
    for r, p in zip(res[:6], pays, strict=True):
        assert r.watermarked and r.levels[0].fields == {"model": p["model"]} and r.scoring == "model-aware"
        assert r.levels[1].fields in ({"user": p["user"]}, {"user": None})
    assert sum(r.levels[1].fields == {"user": p["user"]} for r, p in zip(res, pays, strict=False)) >= 4
    assert not any(r.watermarked for r in res[6:])


@pytest.mark.slow
def test_v5_step_is_unbiased_per_step_over_keys():
    """Theorem 1 for the v5 step: at one context, over keys (2,000 master pairs x 4 payloads), the tokens follow
    P exactly (chi-square over mass bins), in the all-public front and after it (where the lane picks a level)."""
    from verifier.engine.fused import make_fused_sampler

    vocab, masters = 2000, 2000
    prof = profile_from_dict({"name": "u", "spec_version": 5, "vocab_size": vocab, "context_width": 3, "segments": 1,
                              "multiplex": {"front_tokens": 50, "front_public": 100, "public": 50},
                              "levels": [{"bits": 2, "fields": [{"name": "model", "bits": 2}]},
                                         {"bits": 2, "fields": [{"name": "user", "bits": 2}]}]})
    pay = torch.tensor([encode_payload(prof, {"model": m, "user": m}) for m in range(4)])
    rows = pay.shape[0]
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    for gen_index, ctx in ((10, [5, 17, 1999]), (80, [42, 42, 7])):
        logits = -1.2 * torch.log(torch.randperm(vocab, generator=g).double() + 1.0)
        probs = torch.softmax(logits, -1).numpy()
        counts = np.zeros(vocab, dtype=np.int64)
        x, c = logits.expand(rows, -1).contiguous(), torch.tensor([ctx]).expand(rows, -1).contiguous()
        for _ in range(masters):
            ks = KeySet(tuple(derive_level_table(rng.randbytes(32), prof, lv, "t") for lv in (1, 2)))
            fs = make_fused_sampler(prof, ks)
            gen = torch.full((rows,), gen_index, dtype=torch.int64)
            counts += np.bincount(fs.step(x, c, pay, gen, fs.new_log(rows)).numpy(), minlength=vocab)
        assert mass_bins_chi2_pvalue(counts, probs) > 1e-3, gen_index


def test_v5_per_token_map_shows_level_ones_positions_only(syn_keys, syn_texts):
    """The evidence map (level 1) lists the positions level 1 read: the whole front (text indices < 50) and, after
    it, only public lanes; their mean evidence for the supported value is far above the null mean 1."""
    pays, ids = syn_texts
    d = Decoder(SYN, {1: [syn_keys.tables[0]]})
    x = ids[0].tolist()
    result, evidence = d.token_evidence(x)
    assert result.levels[0].fields == {"model": pays[0]["model"]}
    pos = [p for p, _ in evidence]
    scored = R.scored_positions(x, SYN.context_width)
    assert set(p for p in scored if p < 50) <= set(pos) and len(pos) == result.levels[0].segment_tokens[0]
    late = [p for p in scored if p >= 50]
    assert 0 < len([p for p in pos if p >= 50]) < len(late)
    assert np.mean([e for _, e in evidence]) > 1.5
