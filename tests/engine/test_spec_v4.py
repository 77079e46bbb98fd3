"""Spec v4 (docs/spec.md section 18): v3's construction under spec_version 4 on every path (the frozen
tests/vectors/hero_v4.json through the reference, torch, C and, where installed, the Triton interpreter), the
issued public values (profile rule, generation refuses others, the decoder searches and corrects for them only),
null calibration, splices, and the sampler's unbiasedness per step over keys."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from gpu import cpu_kernel, prf
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys
from gpu.step import SPEC_VERSIONS, FusedSampler
from tests.engine.test_spec_v3 import _cases as _decode_cases  # the vectors' decode cases have one layout
from tests.helpers.draws import mass_bins_chi2_pvalue
from tests.helpers.triton_interpreter import assert_passes_interpreted
from verifier.engine import reference as R
from verifier.engine.decoder import Decoder
from verifier.engine.keys import (
    HKDF_SALT_V3,
    KeySet,
    _hkdf_many,
    derive_level_table,
    v3_entry_info,
    v3_level_key,
    v3_position_key,
)
from verifier.engine.payload import PayloadError, encode_payload
from verifier.engine.profile import ProfileError, profile_from_dict, resolve_profile

ROOT = Path(__file__).parents[2]
VECTORS = ROOT / "tests" / "vectors" / "hero_v4.json"


@pytest.fixture(scope="module")
def v4():
    return json.loads(VECTORS.read_text())


def _backends() -> list[str]:
    return ["torch", *(["native"] if cpu_kernel.available() else [])]


def test_v4_vectors_keys_and_draws(v4):
    """Keys (HKDF as v3), level seed ^ value key, stream words: reference and torch give the frozen values."""
    from gpu.torch_kernel import candidate_seeds

    assert v4["spec_version"] == 4 and 4 in SPEC_VERSIONS
    for v in v4["hkdf"]:
        master = bytes.fromhex(v["master"])
        assert v3_level_key(master, v["level"]).hex() == v["level_key"]
        assert v3_position_key(master).hex() == v["position_key"]
        assert _hkdf_many(master, HKDF_SALT_V3, [v3_entry_info(v["level"], v["value"], v["per_value"])])[0].hex() \
            == v["value_key"]
    for v in v4["draw"]:
        lk, vk = bytes.fromhex(v["level_key"]), bytes.fromhex(v["value_key"])
        s0, s1 = R.table_seed(vk, v["context"], lk)
        assert (f"{s0:016x}", f"{s1:016x}") == (v["s0"], v["s1"])
        ts0, ts1 = candidate_seeds(LevelKeys(1, *prf.key_words([vk]), seed_key=prf.key_words([lk])),
                                   torch.tensor([v["context"]]))
        for w in v["words"]:
            assert R.random_u32((s0, s1), w["j"]) == w["u32"] and R.evidence(w["u32"]) == w["evidence"]
            assert int(prf.random_u32_indexed(ts0, ts1, torch.tensor([[w["j"]]]))) == w["u32"]


def test_v4_window_scores_reference(v4):
    cases = list(_decode_cases(v4))
    assert cases[0][0]["schedule"] == [80] and cases[0][0]["context_width"] == 3  # the v4 profile's shape
    for v, tables, *_ in cases:
        scores, counts = R.window_scores(v["ids"], v["context_width"], v["vocab_size"], v["schedule"],
                                         v["segments"], bytes.fromhex(v["position_key"]), tables, v["stride"],
                                         v["windows"])
        assert counts == v["counts"] and scores == v["scores"]


def check_decode_kernel(v4, backend: str) -> None:
    """The C kernel bit for bit; torch and Triton within 1e-12 (their float64 log may differ in the last bit)."""
    for v, _, spec, pk, lk in _decode_cases(v4):
        got, counts = segment_scores(torch.tensor([v["ids"]]), torch.tensor([len(v["ids"])]), spec, pk, lk,
                                     backend=backend)
        assert counts[0].tolist() == v["counts"]
        for g, want in zip(got, v["scores"], strict=True):
            w = torch.tensor(want, dtype=torch.float64)
            assert torch.equal(g[0], w) if backend == "native" else torch.allclose(g[0], w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", _backends())
def test_v4_window_scores_kernels(v4, backend):
    check_decode_kernel(v4, backend)


def _vector_profile(v, issued: bool = False):
    segs = v["segments"]
    return profile_from_dict({
        "name": "vec4", "spec_version": 4, "vocab_size": v["vocab_size"], "segments": segs,
        "levels": [
            {"bits": b, "encoding": "value", **({"chunks": v["schedule"][i]} if i < len(v["schedule"]) else {}),
             **({"issued": [v["values"][0]]} if issued and i == 0 else {}),
             "fields": [{"name": f"f{i}", "bits": b * segs}]}
            for i, b in enumerate(v["bits"])
        ],
    })


def step_cases(v4, issued: bool = False):
    """(FusedSampler of spec 4 over the engine's sampler, logits, context, payload, token) per sample vector."""
    from verifier.engine.fused import make_sampler

    out = []
    for v in v4["sample"]:
        profile = _vector_profile(v, issued)
        masters = [bytes.fromhex(m) for m in v["masters"]]
        ks = KeySet(tuple(derive_level_table(m, profile, lv, "t") for lv, m in enumerate(masters, start=1)))
        fs = FusedSampler(make_sampler(profile, ks), len(v["context"]), 4)
        pay = torch.tensor([encode_payload(profile, {f"f{i}": x for i, x in enumerate(v["values"])})])
        out.append((fs, v["logits"], v["context"], pay, v["token"]))
    return out


def check_step(v4, backend: str | None, dtypes=(torch.float64, torch.float32)) -> None:
    for issued in (False, True):  # an issued list changes nothing in generation (only which values are allowed)
        cases = step_cases(v4, issued)
        assert len(cases) == len(v4["sample"]) >= 7
        for fs, logits, ctx, pay, want in cases:
            for dtype in dtypes:
                gen = torch.full((1,), 10, dtype=torch.int64)
                log = fs.new_log(1)
                tokens, marks = fs.step(torch.tensor([logits], dtype=dtype), torch.tensor([ctx]), pay, gen, log,
                                        backend=backend, with_marks=True)
                assert bool(marks.all()) and tokens.tolist() == [want], (backend, dtype)


@pytest.mark.parametrize("backend", [None, *_backends()])
def test_v4_generation_step_matches_the_frozen_vectors(v4, backend):
    """The fused step every generation path calls (default backend, C, torch) gives the frozen v4 tokens."""
    check_step(v4, backend)


@pytest.mark.slow
def test_v4_triton_in_interpreter():
    """The Triton step and decode kernels on the CPU through TRITON_INTERPRET=1 (own process)."""
    pytest.importorskip("triton")
    code = ("import json, sys; sys.path.insert(0, '.'); import tests.engine.test_spec_v4 as t\n"
            "v = json.loads(t.VECTORS.read_text())\n"
            "t.check_step(v, 'triton', dtypes=(__import__('torch').float64,))\n"
            "t.check_decode_kernel(v, 'triton')\nprint('ok')\n")
    assert_passes_interpreted(code, timeout=900)


# --- issued values -------------------------------------------------------------------------------------------

BASE = {"name": "p", "vocab_size": 4000, "context_width": 3, "segments": 4,
        "levels": [{"bits": 2, "chunks": 20, "encoding": "value", "issued": [200, 3, 77, 255],
                     "fields": [{"name": "model", "bits": 8}]},
                   {"bits": 3, "encoding": "value", "fields": [{"name": "user", "bits": 12}]}]}
SYN = profile_from_dict({**BASE, "spec_version": 4})
SYN3 = profile_from_dict({**BASE, "spec_version": 3, "levels": [
    {k: x for k, x in BASE["levels"][0].items() if k != "issued"}, BASE["levels"][1]]})


def test_profile_rules_for_issued_values():
    assert SYN.levels[0].issued == (3, 77, 200, 255) and SYN.levels[0].searched == 4
    assert SYN.levels[1].issued is None and SYN.levels[1].searched == 4096
    assert SYN.to_dict()["levels"][0]["issued"] == [3, 77, 200, 255]
    assert profile_from_dict(SYN.to_dict()) == SYN
    with pytest.raises(ProfileError, match="spec_version 4"):
        profile_from_dict({**BASE, "spec_version": 3})
    for bad, msg in (([], "1..1024"), ([1, 1], "twice"), ([256], "0..255"), ([True], "integer"), ("0", "list")):
        lv = {**BASE["levels"][0], "issued": bad}
        with pytest.raises(ProfileError, match=msg):
            profile_from_dict({**BASE, "spec_version": 4, "levels": [lv, BASE["levels"][1]]})
    seg = {**BASE["levels"][0], "encoding": "segments"}
    with pytest.raises(ProfileError, match="per-value"):
        profile_from_dict({**BASE, "spec_version": 4, "levels": [seg, BASE["levels"][1]]})
    shipped = resolve_profile("v4")
    assert shipped.spec_version == 4 and shipped.levels[0].issued == (0, 1, 2, 3)
    assert shipped.schedule == (80,) and shipped.context_width == 3 and shipped.routing == "contiguous"
    assert {f.name: f.bits for lv in shipped.levels for f in lv.fields} == {"model": 8, "user": 12}
    inter = resolve_profile("v4-interleaved")  # the moderator-first option of section 18.2
    assert inter.routing_stride == 80 and inter.levels == shipped.levels and inter.spec_version == 4


def test_generation_refuses_a_value_not_issued():
    encode_payload(SYN, {"model": 77, "user": 5})
    with pytest.raises(PayloadError, match="model=78 is not issued"):
        encode_payload(SYN, {"model": 78, "user": 5})


@pytest.fixture(scope="module")
def syn_keys():
    from tests.helpers.keys import fixed_keyset

    return fixed_keyset(SYN, 3)  # one key set: the null test's bound (no text called watermarked of 300) is per key set


def test_moderator_searches_the_issued_values_only(syn_keys):
    """The released model is an issued value, `searched` is their count, and the level p-value is corrected for
    4 values instead of 256: the same text under spec v3 (same keys) has a p-value 64 times larger."""
    from tests.helpers.synthetic import generate

    rng = random.Random(5)
    issued = list(SYN.levels[0].issued)
    pays = [{"model": rng.choice(issued), "user": rng.randrange(4096)} for _ in range(16)]
    ids = generate(SYN, syn_keys, pays, 40, seed=3).tolist()
    mod4 = Decoder(SYN, {1: [syn_keys.tables[0]]}).decode_ids(ids)
    mod3 = Decoder(SYN3, {1: [syn_keys.tables[0]]}).decode_ids(ids)
    exact = 0
    for a, b, p in zip(mod4, mod3, pays, strict=True):
        lv, lv3 = a.levels[0], b.levels[0]
        assert lv.searched == 4 and lv3.searched == 256 and a.to_dict()["levels"][0]["searched"] == 4
        if lv.status == "decoded":
            assert lv.fields == {"model": p["model"]}
            exact += 1
        if lv3.p_value < 1e-6:  # the true value wins both searches: p = 1 - (1 - Q)^N, N = 4 against 256
            assert math.isclose(lv.log10_p_value - lv3.log10_p_value, math.log10(4 / 256), abs_tol=1e-3)
    assert exact >= 12
    # the one-value test still indexes keys by value (not by position in the issued list)
    from verifier.engine.expected import expected_log_p

    d = Decoder(SYN, {1: [syn_keys.tables[0]]})
    lp = expected_log_p(d, ids[:4], 1, pays[0]["model"], [None] * 4)
    assert lp[0] < math.log(1e-4)


def test_null_p_values_of_issued_search_are_uniform(syn_keys):
    """Unmarked text (uniform ids, and text marked with another key set): level-1 p-values over the 4 issued
    values are uniform (KS), none reaches 1e-3 among 300, nothing is released."""
    from tests.helpers.keys import fixed_keyset
    from tests.helpers.synthetic import generate

    g = torch.Generator().manual_seed(11)
    human = torch.randint(0, 4000, (200, 60), generator=g).tolist()
    # the other key set fixed too: the bounds below hold per pair of key sets with high probability, not always
    other = generate(SYN, fixed_keyset(SYN, 9, label="other"), [{"model": 3, "user": 1}] * 100, 60, seed=4).tolist()
    res = Decoder(SYN, {1: [syn_keys.tables[0]], 2: [syn_keys.tables[1]]}).decode_ids(human + other)
    p1 = np.array([r.levels[0].p_value for r in res])
    assert sps.kstest(p1, "uniform").pvalue > 1e-4
    assert (p1 <= 1e-3).sum() <= 2  # expected 0.3
    assert not any(r.watermarked for r in res)
    assert all(lv.fields is None or set(lv.fields.values()) == {None} for r in res for lv in r.levels)
    absent = [lv for r in res for lv in r.levels if lv.status == "absent"]
    assert absent and all(lv.reason.startswith("not significant: p = ") for lv in absent)


def test_two_model_splices_never_name_a_third_issued_model(syn_keys):
    from tests.helpers.synthetic import generate

    rng = random.Random(6)
    n = 30
    pairs = [rng.sample(list(SYN.levels[0].issued), 2) for _ in range(n)]
    pa = [{"model": a, "user": rng.randrange(4096)} for a, _ in pairs]
    pb = [{"model": b, "user": rng.randrange(4096)} for _, b in pairs]
    a, b = generate(SYN, syn_keys, pa, 200, seed=7), generate(SYN, syn_keys, pb, 200, seed=8)
    res = Decoder(SYN, {1: [syn_keys.tables[0]]}).decode_ids(torch.cat([a[:, :100], b[:, 100:]], dim=1).tolist())
    both = 0
    for r, (x, y) in zip(res, pairs, strict=True):
        lv = r.levels[0]
        named = {lv.fields["model"]} if lv.status == "decoded" else set()
        named |= {c["fields"]["model"] for c in lv.candidates or []}
        named |= {s["fields"]["model"] for s in lv.spans or []}
        assert named <= {x, y}
        both += named == {x, y}
    assert both >= n // 2


@pytest.mark.slow
def test_v4_sampler_is_unbiased_per_step_over_keys():
    """Theorem 1 for the v4 step: at one fixed context (one step), over keys (2,500 master pairs, each drawing
    for 4 (model, user) pairs with distinct value keys at both levels: 10,000 independent draws), the fused step
    every generation path calls draws P exactly: chi-square over mass bins does not reject at 1e-3, at two steps
    (two contexts and distributions). Rows sharing a value key would share its draw (not independent)."""
    from verifier.engine.fused import make_sampler

    vocab, masters = 2000, 2500
    prof = profile_from_dict({"name": "u", "spec_version": 4, "vocab_size": vocab, "context_width": 3,
                              "segments": 1, "levels": [
                                  {"bits": 2, "chunks": 80, "encoding": "value", "issued": [0, 1, 2, 3],
                                   "fields": [{"name": "model", "bits": 2}]},
                                  {"bits": 2, "encoding": "value", "fields": [{"name": "user", "bits": 2}]}]})
    pay = torch.tensor([encode_payload(prof, {"model": m, "user": m}) for m in range(4)])
    rows = pay.shape[0]
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    for step, ctx in enumerate(([5, 17, 1999], [42, 42, 7])):
        logits = -1.2 * torch.log(torch.randperm(vocab, generator=g).double() + 1.0)  # Zipf(1.2), shuffled
        probs = torch.softmax(logits, -1).numpy()
        counts = np.zeros(vocab, dtype=np.int64)
        x, c = logits.expand(rows, -1).contiguous(), torch.tensor([ctx]).expand(rows, -1).contiguous()
        gen = torch.full((rows,), 10, dtype=torch.int64)
        for _ in range(masters):
            ks = KeySet(tuple(derive_level_table(rng.randbytes(32), prof, lv, "t") for lv in (1, 2)))
            fs = FusedSampler(make_sampler(prof, ks), 3, 4)
            counts += np.bincount(fs.step(x, c, pay, gen.clone(), fs.new_log(rows)).numpy(), minlength=vocab)
        assert mass_bins_chi2_pvalue(counts, probs) > 1e-3, step


# --- results that read right (every spec version) -------------------------------------------------------------

def _level(level: int, status: str, p: float, tokens: int):
    from verifier.engine.verdicts import LevelResult

    return LevelResult(level=level, key_version=None, fields={"f": None}, confidence=0.0, p_value=p,
                       log10_p_value=math.log10(p), bit_confidence=[], segment_tokens=[tokens], undecoded_segments=[],
                       versions_tried=1, status=status)


@pytest.mark.parametrize(("p2", "tokens", "flagged"), [
    (5e-3, 150, False),  # a genuine top-k/p text whose level 2 is merely short of alpha: normal, no warning
    (0.009, 400, False),
    (0.3, 150, True),  # no sign of the deeper level's mark over enough tokens: made with level-1 keys only?
    (0.3, 60, False),  # too few tokens to expect the deeper level's evidence
])
def test_inconsistent_levels_only_when_a_deeper_level_is_far_from_significant(p2, tokens, flagged):
    from verifier.engine.verdicts import text_flags as _flags

    levels = [_level(1, "decoded", 1e-9, tokens), _level(2, "absent", p2, tokens)]
    assert (_flags(levels) == ["inconsistent-levels"]) is flagged
    levels[0].status = "detected"
    assert _flags(levels) == []


def test_absent_reason_says_not_significant_with_the_p_value():
    from verifier.engine.verdicts import not_significant

    text = not_significant(math.log(0.005), math.log(1e-4))
    assert text.startswith("not significant: p = 0.005 does not reach alpha = 0.0001")
    assert "no evidence" not in text
