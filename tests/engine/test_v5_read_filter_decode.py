"""Spec v5 decoding through the kernel's read filter (engine/multiplexed.py `decode_reads`: one kernel call per
(texts of a level-1 version, hypothesis, level), 8 windows) gives the same bits as the per-token path it replaced
(`_decode_reads_per_token`: one window per scored token, window sums on the host): every level read, every field
of every result, on watermarked, excerpted, random, short and empty texts, with two key versions per level."""

from __future__ import annotations

import random

import pytest
import torch

from gpu import cpu_kernel
from tests.helpers.keys import fixed_keyset
from tests.helpers.synthetic import generate
from verifier.engine import multiplexed
from verifier.engine.decoder import Decoder
from verifier.engine.profile import profile_from_dict, resolve_profile

SYN = profile_from_dict({**resolve_profile("v5").to_dict(), "name": "v5-syn", "vocab_size": 4000})


@pytest.fixture(scope="module")
def texts():
    ks = fixed_keyset(SYN, 5)
    other = fixed_keyset(SYN, 6, label="other")
    rng = random.Random(3)
    pays = [{"model": rng.choice(list(SYN.levels[0].issued)), "user": rng.randrange(4096)} for _ in range(6)]
    marked = generate(SYN, ks, pays, 160, sigma=1.0, seed=4).tolist()
    theirs = generate(SYN, other, pays[:2], 120, sigma=1.0, seed=5).tolist()
    g = torch.Generator().manual_seed(1)
    human = torch.randint(0, SYN.vocab_size, (4, 90), generator=g).tolist()
    repeated = [human[0][:30] * 3]
    batch = marked + [t[60:] for t in marked[:3]] + theirs + human + repeated + [marked[0][:20], marked[1][:3], []]
    return ks, other, batch


def _decoders(ks, other):
    yield Decoder(SYN, {1: [ks.tables[0]]})  # the moderator
    yield Decoder(SYN, {1: [ks.tables[0]], 2: [ks.tables[1]]})  # the auditor
    yield Decoder(SYN, {1: [ks.tables[0], other.tables[0]], 2: [ks.tables[1], other.tables[1]]})  # two versions


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_read_filter_decodes_bit_identical_to_the_per_token_path(texts, backend, monkeypatch):
    if backend == "native" and not cpu_kernel.available():
        pytest.skip("no C kernel")
    if backend == "torch":  # the torch kernel, and the positions' lanes from torch's PRF
        monkeypatch.setattr("gpu.evidence.select_backend", lambda *a, **k: "torch")
        monkeypatch.setattr(cpu_kernel, "available", lambda: False)
        monkeypatch.setattr(cpu_kernel, "segment_scores", None)  # nothing reaches the C kernel
    ks, other, batch = texts
    released = 0
    for d in _decoders(ks, other):
        new = multiplexed.decode_reads(d, batch)
        old = multiplexed._decode_reads_per_token(d, batch)
        for a, b in zip(new, old, strict=True):
            assert len(a) == len(b) == len(d.tables)
            for x, y in zip(a, b, strict=True):
                assert (x.table.version, x.hypothesis, x.positions, x.scored) == \
                       (y.table.version, y.hypothesis, y.positions, y.scored)
                assert x.attribution == y.attribution
        res_new = d.decode_ids(batch)
        with monkeypatch.context() as m:
            m.setattr(multiplexed, "decode_reads", multiplexed._decode_reads_per_token)
            res_old = d.decode_ids(batch)
        assert res_new == res_old
        released += sum(r.watermarked for r in res_new)
    assert released >= 12  # the marked texts and excerpts are decoded, not only the null ones

