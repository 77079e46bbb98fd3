"""The frozen spec: reference and torch implementations reproduce tests/vectors/hero_v1.json and
hero_v2.json bit for bit (floating-point evidence sums within 1e-12 on torch)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from gpu import prf
from gpu.evidence import segment_scores
from gpu.partition import routing_paths
from gpu.sampler import route_and_sample
from gpu.scoring import LevelKeys, ScoringSpec
from verifier.engine import reference as R
from verifier.engine.keys import (
    KeySet,
    derive_level_table,
    entry_key,
    position_key,
    v2_entry_key,
    v2_position_key,
)
from verifier.engine.payload import encode_payload
from verifier.engine.profile import profile_from_dict

M64 = (1 << 64) - 1


def u64(t: torch.Tensor) -> int:
    return int(t) & M64


def test_siphash_reference_matches_published_vectors(vectors):
    # SipHash paper / reference implementation vectors (64-bit output, key 00..0f, msg 00..0e).
    key = bytes(range(16))
    assert R.siphash24(key, bytes(range(15)), out128=False)[0] == 0xA129CA6149BE45E5
    assert R.siphash24(key, b"", out128=False)[0] == 0x726FDB47DD0E0E31
    lo, hi = R.siphash24(key, b"")
    assert (lo.to_bytes(8, "little") + hi.to_bytes(8, "little")).hex() == "a3817f04ba25a8e66df67214c7550293"
    for v in vectors["siphash24_128"]:
        lo, hi = R.siphash24(bytes.fromhex(v["key"]), bytes.fromhex(v["msg"]))
        assert (f"{lo:016x}", f"{hi:016x}") == (v["lo"], v["hi"])


def test_philox_reference_and_torch_match_random123_kat(vectors):
    for v in vectors["philox4x32_10"]:
        assert list(R.philox4x32_10(v["ctr"], v["key"])) == v["out"]
        t = [torch.tensor([x], dtype=torch.int64) for x in (*v["ctr"], *v["key"])]
        assert [int(x) for x in prf.philox4x32_10(*t)] == v["out"]


def test_hkdf_key_derivation(vectors):
    for v in vectors["hkdf"]:
        master = bytes.fromhex(v["master"])
        assert entry_key(master, v["level"], v["value"]).hex() == v["entry_key"]
        assert position_key(master).hex() == v["position_key"]


def test_prf_and_streams_reference_and_torch(vectors):
    for v in vectors["prf"]:
        key = bytes.fromhex(v["key"])
        s0, s1 = R.prf_seed(key, v["context"])
        assert (f"{s0:016x}", f"{s1:016x}") == (v["s0"], v["s1"])
        k0, k1 = prf.key_words([key])
        ts0, ts1 = prf.prf_seed(k0[0], k1[0], torch.tensor(v["context"]))
        assert (u64(ts0), u64(ts1)) == (s0, s1)
        assert R.position((s0, s1), 6) == v["position_K6"] == int(prf.position_of(ts0, ts1, 6))
        assert R.position((s0, s1), 97) == v["position_K97"] == int(prf.position_of(ts0, ts1, 97))
        js = torch.tensor([w["j"] for w in v["words"]])
        tu = prf.random_u32_indexed(ts0.expand(len(js)), ts1.expand(len(js)), js)
        for w, u in zip(v["words"], tu.tolist(), strict=True):
            assert R.random_u32((s0, s1), w["j"]) == w["u32"] == u
            assert R.u32_to_uniform(u) == w["uniform"]
            assert 0.0 < w["uniform"] < 1.0
            assert math.isclose(R.evidence(u), w["evidence"], rel_tol=0, abs_tol=0)
            assert float(prf.u32_to_uniform(torch.tensor(u))) == w["uniform"]
            assert math.isclose(float(prf.u32_to_evidence(torch.tensor(u))), w["evidence"], rel_tol=1e-15)
        stream = prf.random_u32_stream(ts0.view(1), ts1.view(1), 24)[0].tolist()
        assert stream == [R.random_u32((s0, s1), j) for j in range(24)]


def test_uniform_extremes_strictly_inside_unit_interval():
    assert R.u32_to_uniform(0) > 0.0
    assert R.u32_to_uniform(0xFFFFFFFF) < 1.0
    assert math.isfinite(R.evidence(0xFFFFFFFF))
    assert float(prf.u32_to_uniform(torch.tensor(0xFFFFFFFF))) < 1.0
    assert torch.isfinite(prf.u32_to_evidence(torch.tensor([0, 0xFFFFFFFF]))).all()


def test_routing_paths(vectors):
    for v in vectors["routing"]:
        toks = [int(t) for t in v["paths"]]
        got = routing_paths(torch.tensor(toks), v["vocab_size"], tuple(v["schedule"])).tolist()
        for t, path in zip(toks, got, strict=True):
            assert R.routing_path(t, v["vocab_size"], v["schedule"]) == v["paths"][str(t)] == path


def test_partition_sizes_differ_by_at_most_one():
    for size in (1, 5, 20, 49152, 32000, 262144):
        for k in (2, 3, 7, 20, 64):
            sizes = [e - s for s, e in (R.chunk_bounds(size, k, i) for i in range(k))]
            assert sum(sizes) == size and max(sizes) - min(sizes) <= 1
            assert R.chunk_bounds(size, k, 0)[0] == 0 and R.chunk_bounds(size, k, k - 1)[1] == size


def test_sampler_matches_reference(vectors):
    for v in vectors["sample"]:
        keys = [bytes.fromhex(k) for k in v["keys"]]
        assert R.hero_sample(_softmax(v["logits"]), v["schedule"], keys, v["context"]) == v["token"]
        ctx = torch.tensor([v["context"]])
        seeds = []
        for k in keys:
            k0, k1 = prf.key_words([k])
            seeds.append(prf.prf_seed(k0, k1, ctx))
        tok = route_and_sample(torch.tensor([v["logits"]], dtype=torch.float64), seeds, tuple(v["schedule"]))
        assert int(tok[0]) == v["token"]


def test_decode_scores_reference_and_torch(vectors):
    for v in vectors["decode"]:
        pos = bytes.fromhex(v["position_key"])
        tables = [(t["level"], [bytes.fromhex(k) for k in t["keys"]]) for t in v["tables"]]
        args = (v["context_width"], v["vocab_size"], v["schedule"], v["segments"], pos, tables)
        scores, counts = R.segment_scores(v["ids"], *args)
        assert counts == v["counts"] and scores == v["scores"]
        assert R.scored_positions(v["ids"], v["context_width"]) == v["scored_positions"]
        assert sum(counts) < len(v["ids"]) - v["context_width"]  # the repeated tail was skipped
        pk = prf.key_words([pos])
        lk = [LevelKeys(lv, *prf.key_words(ks)) for lv, ks in tables]
        ids = torch.tensor([v["ids"], v["ids"][:20] + [0] * (len(v["ids"]) - 20)])
        spec = ScoringSpec(v["context_width"], v["vocab_size"], tuple(v["schedule"]), v["segments"])
        tscores, tcounts = segment_scores(ids, torch.tensor([len(v["ids"]), 20]), spec, (pk[0][0], pk[1][0]), lk)
        assert tcounts[0, 0].tolist() == counts
        for li, ts in enumerate(tscores):
            assert torch.allclose(ts[0, 0], torch.tensor(scores[li], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        _short, short_counts = R.segment_scores(v["ids"][:20], *args)
        assert tcounts[1, 0].tolist() == short_counts


@pytest.mark.parametrize("h", [1, 2, 3, 4, 7])
def test_random_inputs_torch_equals_reference(h):
    rng = random.Random(h)
    keys = [bytes(rng.randrange(256) for _ in range(16)) for _ in range(3)]
    k0, k1 = prf.key_words(keys)
    ctx = torch.tensor([[rng.randrange(2**32) for _ in range(h)] for _ in range(16)])
    s0, s1 = prf.prf_seed(k0, k1, ctx.unsqueeze(1))
    for n in range(16):
        for c in range(3):
            assert R.prf_seed(keys[c], ctx[n].tolist()) == (u64(s0[n, c]), u64(s1[n, c]))


def _softmax(logits):
    m = max(logits)
    z = math.fsum(math.exp(x - m) for x in logits)
    return [math.exp(x - m) / z for x in logits]


def test_interleaved_layout_vectors(vectors):
    from gpu.partition import deinterleave, interleave

    for v in vectors["interleave"]:
        vocab, stride = v["vocab_size"], v["stride"]
        toks = [int(t) for t in v["rho"]]
        assert [R.interleave(t, vocab, stride) for t in toks] == list(v["rho"].values())
        assert interleave(torch.tensor(toks), vocab, stride).tolist() == list(v["rho"].values())
        assert deinterleave(torch.tensor(list(v["rho"].values())), vocab, stride).tolist() == toks
        got = routing_paths(torch.tensor(toks), vocab, (stride,), stride).tolist()
        assert got == [v["paths"][str(t)] for t in toks]
        assert [R.routing_path(t, vocab, [stride], stride) for t in toks] == got
    # a bijection on the whole vocabulary
    rho = interleave(torch.arange(49152), 49152, 20)
    assert torch.equal(rho.sort().values, torch.arange(49152))


def test_interleaved_sampler_matches_reference(vectors):
    for v in vectors["sample_interleaved"]:
        keys = [bytes.fromhex(k) for k in v["keys"]]
        assert R.hero_sample(_softmax(v["logits"]), v["schedule"], keys, v["context"], v["stride"]) == v["token"]
        ctx = torch.tensor([v["context"]])
        seeds = [prf.prf_seed(*[w for w in prf.key_words([k])], ctx) for k in keys]
        tok = route_and_sample(
            torch.tensor([v["logits"]], dtype=torch.float64), seeds, tuple(v["schedule"]), v["stride"]
        )
        assert int(tok[0]) == v["token"]


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_interleaved_decode_vectors(vectors, backend):
    for v in vectors["decode_interleaved"]:
        pos = bytes.fromhex(v["position_key"])
        tables = [(t["level"], [bytes.fromhex(k) for k in t["keys"]]) for t in v["tables"]]
        args = (v["context_width"], v["vocab_size"], v["schedule"], v["segments"], pos, tables, v["stride"])
        scores, counts = R.segment_scores(v["ids"], *args)
        assert counts == v["counts"] and scores == v["scores"]
        pk = prf.key_words([pos])
        lk = [LevelKeys(lv, *prf.key_words(ks)) for lv, ks in tables]
        spec = ScoringSpec(v["context_width"], v["vocab_size"], tuple(v["schedule"]), v["segments"], v["stride"])
        tscores, tcounts = segment_scores(torch.tensor([v["ids"]]), torch.tensor([len(v["ids"])]), spec,
                                          (pk[0][0], pk[1][0]), lk, backend=backend)
        assert tcounts[0, 0].tolist() == counts
        for li, ts in enumerate(tscores):
            assert torch.allclose(ts[0, 0], torch.tensor(scores[li], dtype=torch.float64), rtol=1e-12, atol=1e-12)


# --- spec v2 -------------------------------------------------------------------------------------


def test_v2_key_derivation(vectors_v2):
    for v in vectors_v2["hkdf"]:
        master = bytes.fromhex(v["master"])
        assert v2_entry_key(master, v["level"], v["value"], v["per_value"]).hex() == v["entry_key"]
        assert v2_position_key(master).hex() == v["position_key"]
        assert entry_key(master, v["level"], v["value"]).hex() != v["entry_key"]  # v1 and v2 domains differ


def v2_decode_cases(vectors_v2):
    for v in vectors_v2["decode"]:
        tables = [(t["level"], [bytes.fromhex(k) for k in t["keys"]], t["per_value"]) for t in v["tables"]]
        spec = ScoringSpec(v["context_width"], v["vocab_size"], tuple(v["schedule"]), v["segments"], v["stride"],
                           v["windows"])
        pk = prf.key_words([bytes.fromhex(v["position_key"])])
        lk = [LevelKeys(lv, *prf.key_words(ks), per_value=pv) for lv, ks, pv in tables]
        yield v, tables, spec, (pk[0][0], pk[1][0]), lk


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_v2_window_scores_reference_and_kernels(vectors_v2, backend):
    for v, tables, spec, pk, lk in v2_decode_cases(vectors_v2):
        scores, counts = R.window_scores(v["ids"], v["context_width"], v["vocab_size"], v["schedule"],
                                         v["segments"], bytes.fromhex(v["position_key"]), tables, v["stride"],
                                         v["windows"])
        assert counts == v["counts"] and scores == v["scores"]
        assert R.scored_positions(v["ids"], v["context_width"]) == v["scored_positions"]
        assert sum(map(sum, counts)) == len(v["scored_positions"])
        tscores, tcounts = segment_scores(torch.tensor([v["ids"]]), torch.tensor([len(v["ids"])]), spec, pk, lk,
                                          backend=backend)
        assert tcounts[0].tolist() == v["counts"]
        for ts, want in zip(tscores, v["scores"], strict=True):
            assert ts[0].shape == (v["windows"], len(want[0]), len(want[0][0]))
            assert torch.allclose(ts[0], torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_v2_generation_step_from_master_secrets(vectors_v2):
    """Derivation, position segment, per-value key choice and routing give the frozen token, drawn by the fused
    step every generation path calls (gpu/step.py), over the engine's key tables."""
    from gpu.step import FusedSampler
    from verifier.engine.fused import make_sampler

    for v in vectors_v2["sample"]:
        segs = v["segments"]
        profile = profile_from_dict({
            "name": "vec", "spec_version": 2, "vocab_size": v["vocab_size"], "segments": segs,
            "levels": [
                {"bits": b, **({"chunks": v["schedule"][i]} if i < len(v["schedule"]) else {}),
                 "fields": [{"name": f"f{i}", "bits": b * segs}]}
                for i, b in enumerate(v["bits"])
            ],
        })
        masters = [bytes.fromhex(m) for m in v["masters"]]
        ks = KeySet(tuple(derive_level_table(m, profile, lv, "t") for lv, m in enumerate(masters, start=1)))
        h = len(v["context"])
        fs = FusedSampler(make_sampler(profile, ks), h, 2)
        ctx = torch.tensor([v["context"]])
        assert int(fs.base.positions(ctx)[0]) == v["segment"]
        pay = torch.tensor([encode_payload(profile, {f"f{i}": x for i, x in enumerate(v["values"])})])
        gen = torch.full((1,), h, dtype=torch.int64)  # a continuation context: a marked draw
        tok, marked = fs.step(torch.tensor([v["logits"]], dtype=torch.float64), ctx, pay, gen, fs.new_log(1),
                              with_marks=True)
        assert bool(marked[0]) and int(tok[0]) == v["token"]
