"""Spec v3 (docs/spec.md section 15): the frozen vectors on every path (reference, torch, C, Triton under the
interpreter when installed), generation from master secrets, and the public level end to end."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
import torch

from gpu import cpu_kernel, prf
from gpu.evidence import segment_scores
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine import reference as R
from verifier.engine.keys import (
    KeySet,
    derive_level_table,
    v2_entry_key,
    v3_entry_info,
    v3_level_key,
    v3_position_key,
)
from verifier.engine.payload import encode_payload
from verifier.engine.profile import ProfileError, profile_from_dict, resolve_profile

VECTORS = Path(__file__).parents[1] / "vectors" / "hero_v3.json"


@pytest.fixture(scope="module")
def v3():
    return json.loads(VECTORS.read_text())


def test_v3_key_derivation(v3):
    from verifier.engine.keys import HKDF_SALT_V3, _hkdf_many

    for v in v3["hkdf"]:
        master = bytes.fromhex(v["master"])
        assert v3_level_key(master, v["level"]).hex() == v["level_key"]
        assert v3_position_key(master).hex() == v["position_key"]
        info = v3_entry_info(v["level"], v["value"], v["per_value"])
        assert _hkdf_many(master, HKDF_SALT_V3, [info])[0].hex() == v["value_key"]
        # the v2 and v3 domains differ: one master never gives the same key under both
        assert v2_entry_key(master, v["level"], v["value"], v["per_value"]).hex() != v["value_key"]


def test_v3_draws_reference_and_torch(v3):
    for v in v3["draw"]:
        lk, vk = bytes.fromhex(v["level_key"]), bytes.fromhex(v["value_key"])
        seed = R.prf_seed(lk, v["context"])
        assert (f"{seed[0]:016x}", f"{seed[1]:016x}") == (v["level_s0"], v["level_s1"])
        s0, s1 = R.v3_seed(seed, vk)
        assert (f"{s0:016x}", f"{s1:016x}") == (v["s0"], v["s1"])
        assert R.table_seed(vk, v["context"], lk) == (s0, s1)
        table = LevelKeys(1, *prf.key_words([vk]), seed_key=prf.key_words([lk]))
        from gpu.torch_kernel import candidate_seeds

        ts0, ts1 = candidate_seeds(table, torch.tensor([v["context"]]))
        for w in v["words"]:
            assert R.random_u32((s0, s1), w["j"]) == w["u32"]
            assert R.evidence(w["u32"]) == w["evidence"]
            tu = prf.random_u32_indexed(ts0, ts1, torch.tensor([[w["j"]]]))
            assert int(tu) == w["u32"]


def _cases(v3):
    for v in v3["decode"]:
        tables = [(t["level"], [bytes.fromhex(k) for k in t["keys"]], t["per_value"], bytes.fromhex(t["level_key"]))
                  for t in v["tables"]]
        spec = ScoringSpec(v["context_width"], v["vocab_size"], tuple(v["schedule"]), v["segments"], v["stride"],
                           v["windows"])
        pk = prf.key_words([bytes.fromhex(v["position_key"])])
        lk = [LevelKeys(lv, *prf.key_words(ks), per_value=pv, seed_key=prf.key_words([sk]))
              for lv, ks, pv, sk in tables]
        yield v, tables, spec, (pk[0][0], pk[1][0]), lk


def _backends():
    out = ["torch"]
    if cpu_kernel.available():
        out.append("native")
    return out


def test_v3_window_scores_reference(v3):
    for v, tables, *_ in _cases(v3):
        scores, counts = R.window_scores(v["ids"], v["context_width"], v["vocab_size"], v["schedule"],
                                         v["segments"], bytes.fromhex(v["position_key"]), tables, v["stride"],
                                         v["windows"])
        assert counts == v["counts"] and scores == v["scores"]
        assert R.scored_positions(v["ids"], v["context_width"]) == v["scored_positions"]


@pytest.mark.parametrize("backend", _backends())
def test_v3_window_scores_kernels(v3, backend):
    """torch within 1e-12 (its float64 log may differ from libm in the last bit); the C kernel bit for bit."""
    for v, _, spec, pk, lk in _cases(v3):
        tscores, tcounts = segment_scores(torch.tensor([v["ids"]]), torch.tensor([len(v["ids"])]), spec, pk, lk,
                                          backend=backend)
        assert tcounts[0].tolist() == v["counts"]
        for ts, want in zip(tscores, v["scores"], strict=True):
            want_t = torch.tensor(want, dtype=torch.float64)
            assert ts[0].shape == want_t.shape
            if backend == "native":
                assert torch.equal(ts[0], want_t)
            else:
                assert torch.allclose(ts[0], want_t, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not cpu_kernel.available(), reason="C kernel not built")
def test_v3_c_kernel_every_isa_and_mixed_tables_match_torch():
    """Every ISA path the CPU has, a batch of rows, a v3 table next to a v2 table in one call (candidate counts
    that leave scalar tails): identical to the torch path up to its last-bit log differences."""
    mod = cpu_kernel.load()
    rng = random.Random(7)
    spec = ScoringSpec(3, 1000, (10,), 3, 0, 4)
    ids = torch.tensor([[rng.randrange(1000) for _ in range(70)] for _ in range(3)])
    lengths = torch.tensor([70, 41, 2])
    pk = prf.key_words([bytes(range(16))])
    keys = [bytes(rng.randrange(256) for _ in range(16)) for _ in range(37)]
    tables = [LevelKeys(1, *prf.key_words(keys), per_value=True, seed_key=prf.key_words([bytes(16)])),
              LevelKeys(2, *prf.key_words(keys[:5]), per_value=False)]
    want, wcounts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), tables, backend="torch")
    before = mod.isa()
    try:
        for name in mod.isas():
            mod.isa(name)
            got, counts = segment_scores(ids, lengths, spec, (pk[0][0], pk[1][0]), tables, backend="native")
            assert torch.equal(counts, wcounts)
            for g, w in zip(got, want, strict=True):
                assert torch.allclose(g, w, rtol=1e-12, atol=1e-12), name
    finally:
        mod.isa(before)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="Triton interpreter only (TRITON_INTERPRET=1)")
def test_v3_triton_interpreter(v3):
    pytest.importorskip("triton")
    from gpu import triton_kernels

    for v, _, spec, pk, lk in _cases(v3):
        got, counts = triton_kernels.segment_scores(torch.tensor([v["ids"]]), torch.tensor([len(v["ids"])]), spec,
                                                    pk, lk)
        assert counts[0].tolist() == v["counts"]
        for g, want in zip(got, v["scores"], strict=True):
            assert torch.allclose(g[0], torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def _vector_profile(v, spec_version=3):
    segs = v["segments"]
    return profile_from_dict({
        "name": "vec", "spec_version": spec_version, "vocab_size": v["vocab_size"], "segments": segs,
        "levels": [
            {"bits": b, "encoding": "value", **({"chunks": v["schedule"][i]} if i < len(v["schedule"]) else {}),
             "fields": [{"name": f"f{i}", "bits": b * segs}]}
            for i, b in enumerate(v["bits"])
        ],
    })


def test_v3_generation_step_from_master_secrets(v3):
    """Derivation, level seed ^ value key, routing: the fused step over the engine's tables gives the frozen token."""
    from gpu.step import FusedSampler
    from verifier.engine.fused import make_sampler

    for v in v3["sample"]:
        profile = _vector_profile(v)
        masters = [bytes.fromhex(m) for m in v["masters"]]
        ks = KeySet(tuple(derive_level_table(m, profile, lv, "t") for lv, m in enumerate(masters, start=1)))
        assert all(t.level_key is not None for t in ks.tables)
        h = len(v["context"])
        fs = FusedSampler(make_sampler(profile, ks), h, 3)
        pay = torch.tensor([encode_payload(profile, {f"f{i}": x for i, x in enumerate(v["values"])})])
        gen = torch.full((1,), h, dtype=torch.int64)  # a continuation context: a marked draw
        tok, marked = fs.step(torch.tensor([v["logits"]], dtype=torch.float64), torch.tensor([v["context"]]), pay,
                              gen, fs.new_log(1), with_marks=True)
        assert bool(marked[0]) and int(tok[0]) == v["token"]


def test_profile_rules_for_v3():
    base = {"name": "p", "vocab_size": 100, "segments": 2,
            "levels": [{"bits": 2, "chunks": 5, "encoding": "value", "fields": [{"name": "model", "bits": 4}]},
                       {"bits": 2, "fields": [{"name": "user", "bits": 4}]}]}
    with pytest.raises(ProfileError, match="spec_version 3"):
        profile_from_dict({**base, "spec_version": 2})
    p = profile_from_dict({**base, "spec_version": 3})
    assert p.levels[0].per_value and p.levels[1].per_value and p.spec_version == 3
    shipped = resolve_profile("v3")
    assert shipped.spec_version == 3 and shipped.levels[0].per_value
    assert {f.name: f.bits for lv in shipped.levels for f in lv.fields} == {"model": 8, "user": 12}


def test_v3_bundle_round_trip_keeps_level_keys():
    from verifier.provider.bundle import decode_tables, encode_tables

    profile = resolve_profile("v3")
    ks = KeySet(tuple(derive_level_table(bytes([lv]) * 32, profile, lv, f"l{lv}-v1") for lv in (1, 2)))
    back = decode_tables(encode_tables(ks))
    for a, b in zip(ks.tables, back.tables, strict=True):
        assert (a.level_key, a.position, a.entries, a.version) == (b.level_key, b.position, b.entries, b.version)
    assert "level_key" not in repr(back) and ks.tables[0].level_key.hex() not in repr(back.tables[0])


# --- the v3 public level and what each role sees (synthetic LM) ------------------------------------------

SYN = profile_from_dict({
    "name": "syn-v3", "spec_version": 3, "vocab_size": 4000, "context_width": 3, "segments": 4,
    "levels": [{"bits": 2, "chunks": 20, "encoding": "value", "fields": [{"name": "model", "bits": 8}]},
               {"bits": 3, "encoding": "value", "fields": [{"name": "user", "bits": 12}]}],
})


@pytest.fixture(scope="module")
def syn_keys():
    from tests.helpers.keys import make_keyset

    return make_keyset(SYN, 3)


def _decoders(keys):
    from verifier.engine.decoder import Decoder

    return Decoder(SYN, {1: [keys.tables[0]]}), Decoder(SYN, {1: [keys.tables[0]], 2: [keys.tables[1]]})


def test_v3_public_model_by_maximum_likelihood_and_auditor_user(syn_keys):
    """A moderator (level-1 keys) names the exact model of single-source texts; an auditor the user too."""
    from tests.helpers.synthetic import generate

    rng = random.Random(5)
    pays = [{"model": rng.randrange(256), "user": rng.randrange(4096)} for _ in range(24)]
    ids = generate(SYN, syn_keys, pays, 120, seed=3).tolist()
    moderator, auditor = _decoders(syn_keys)
    mod, aud = moderator.decode_ids(ids), auditor.decode_ids(ids)
    exact = 0
    for m, a, p in zip(mod, aud, pays, strict=True):
        assert m.spec_version == 3 and m.watermarked and len(m.levels) == 1
        assert m.levels[0].status in ("decoded", "absent") or m.levels[0].status == "mixed"
        if m.levels[0].status == "decoded":
            assert m.levels[0].fields == {"model": p["model"]}  # never a wrong model
            exact += 1
        assert a.levels[1].status == "decoded" and a.levels[1].fields == {"user": p["user"]}
    assert exact >= 22


def test_v3_two_model_splices_never_name_a_third_model(syn_keys):
    from tests.helpers.synthetic import generate

    rng = random.Random(6)
    n = 30
    pa = [{"model": rng.randrange(256), "user": rng.randrange(4096)} for _ in range(n)]
    pb = [{"model": rng.randrange(256), "user": rng.randrange(4096)} for _ in range(n)]
    a, b = generate(SYN, syn_keys, pa, 200, seed=7), generate(SYN, syn_keys, pb, 200, seed=8)
    moderator, _ = _decoders(syn_keys)
    res = moderator.decode_ids(torch.cat([a[:, :100], b[:, 100:]], dim=1).tolist())
    both = 0
    for r, x, y in zip(res, pa, pb, strict=True):
        lv = r.levels[0]
        named = set()
        if lv.status == "decoded":
            named.add(lv.fields["model"])
        for c in lv.candidates or []:
            named.add(c["fields"]["model"])
        assert named <= {x["model"], y["model"]}
        both += named == {x["model"], y["model"]}
    assert both >= n // 2  # per-value public level: a splice names both models (`mixed`) most of the time


def test_auditor_verdict_never_weaker_than_moderator(syn_keys):
    """On the same texts (short, long, spliced with noise, unmarked), an auditor's `watermarked` holds whenever a
    moderator's does, and its p-value is within a factor 2 of level 1's (spec 15.4)."""
    from tests.helpers.synthetic import generate
    from verifier.engine.keys import KeySet

    rng = random.Random(8)
    pays = [{"model": rng.randrange(256), "user": rng.randrange(4096)} for _ in range(40)]
    # level 2 made with another key: the auditor's level 2 is pure noise, the worst case for a combination
    other = KeySet((syn_keys.tables[0], derive_level_table(bytes(32), SYN, 2, "x")))
    marked = generate(SYN, other, pays, 60, seed=9).tolist()
    noise = torch.randint(0, 4000, (40, 60), generator=torch.Generator().manual_seed(2)).tolist()
    texts = [m[: 15 + i] for i, m in enumerate(marked)] + [m[:30] + z[:30] for m, z in zip(marked, noise, strict=True)]
    texts += noise
    moderator, auditor = _decoders(syn_keys)
    mods, auds = moderator.decode_ids(texts), auditor.decode_ids(texts)
    seen = 0
    for m, a in zip(mods, auds, strict=True):
        assert a.levels[0].p_value == m.levels[0].p_value
        assert a.watermarked or not m.watermarked
        assert a.p_value <= 2 * m.p_value * (1 + 1e-9)
        seen += m.watermarked
    assert 10 <= seen < len(texts)


def test_text_p_value_is_calibrated_under_the_null():
    """log_text_p: exact tail of min(p1, Fisher(p1, p2)) for independent uniform level p-values."""
    import numpy as np

    from verifier.engine import stats

    rng = np.random.default_rng(0)
    n = 200_000
    p = rng.random((n, 2))
    lp = np.array([stats.log_text_p([float(np.log(a)), float(np.log(b))]) for a, b in p[:20_000]])
    for x in (0.5, 0.1, 0.01):
        frac = float(np.mean(lp <= np.log(x)))
        assert abs(frac - x) < 4 * np.sqrt(x * (1 - x) / 20_000), (x, frac)
    # the rare tail through the closed form: P0[min(p1, F) <= x] computed by Monte Carlo on 200k pairs
    x = 1e-3
    q = p[:, 0] * p[:, 1]
    f = np.log(q) + np.log1p(-np.log(q))  # Fisher with two p-values: P[chi2_4 > -2 ln q] = q (1 - ln q)
    assert math.isclose(float(f[0]), stats.log_fisher([float(np.log(p[0, 0])), float(np.log(p[0, 1]))]), rel_tol=1e-9)
    m = np.minimum(np.log(p[:, 0]), f)
    hit = m <= np.log(x)
    want = float(np.exp(stats.log_text_p([np.log(x), 0.0])))  # p of a text whose min statistic is x
    assert abs(hit.mean() - want) < 4 * np.sqrt(want / n), (hit.mean(), want)
    assert x < want <= 2 * x
    assert stats.log_text_p([np.log(0.3)]) == np.log(0.3)
