"""Attribution section of `hero eval`: splices, false-attribution counting, release gating,
reliability bins, collusion statistics, sampling settings in the cache key, and a small end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hero_eval import collusion as col
from hero_eval import metrics
from hero_eval.attribution import (
    HERO_V1,
    HERO_V2,
    Attribution,
    attribute,
    build_attr_method,
    count_exact,
    count_false,
    gate,
    model_value,
    payload_for,
)
from hero_eval.methods import _bits_to_int
from hero_eval.sampling import PROVIDER, T1, Sampling
from hero_eval.splices import build_splices, classify, splice_ids


# -- splices ------------------------------------------------------------------------------------------
def test_splice_concatenates_two_users_token_ids_at_the_ratio():
    a, b = list(range(1000, 1200)), list(range(5000, 5200))
    s = splice_ids(a, b, 0.8, 200)
    assert s == a[:160] + b[:40]
    assert splice_ids(a, b, 0.5, 200) == a[:100] + b[:100]
    with pytest.raises(ValueError):
        splice_ids(a[:50], b, 0.5, 200)  # A's text is too short for its share
    with pytest.raises(ValueError):
        splice_ids(a, b, 1.0, 200)


def test_build_splices_pairs_neighbours_and_skips_equal_users():
    ids = [[100 * i + j for j in range(40)] for i in range(4)]
    users = [7, 7, 9, 11]  # texts 0 and 1 share a user: that pair is skipped, not counted as a splice
    sp, skipped = build_splices(ids, users, 0.5, 40)
    assert skipped == 1
    assert [(s.a, s.b) for s in sp] == [(1, 2), (2, 3), (3, 0)]
    first = sp[0]
    assert first.users == (7, 9) and first.ids == tuple(ids[1][:20] + ids[2][:20]) and first.n_a == 20


def test_splice_classification_flags_third_party_values():
    users = (5, 9)
    assert classify({5, 9}, users, "mixed") == "both"
    assert classify({5}, users, "decoded") == "one"
    assert classify(set(), users, "absent") == "none"
    assert classify({5, 9, 13}, users, "mixed") == "third"  # a third name in a mixed result still frames 13
    assert classify({13}, users, "decoded") == "third"


# -- counting -----------------------------------------------------------------------------------------
def test_false_attribution_counter_counts_planted_wrong_values():
    human = [Attribution(None, "absent", 0.1) for _ in range(99)] + [Attribution(1234, "decoded", 9.0)]
    assert count_false(human, [set()] * 100) == 1
    own = [Attribution(7, "decoded", 30.0), Attribution(8, "decoded", 30.0), Attribution(None, "mixed", 30.0, (7, 8))]
    # a wrong value, and a mixed result that also names someone else, are both false attributions of user 7
    assert count_false(own, [{7}, {7}, {7}]) == 2
    assert count_exact(own, [7, 7, 7]) == 1  # mixed releases no single value: a miss, not a hit
    splice = [Attribution(None, "mixed", 20.0, (3, 4)), Attribution(5, "decoded", 20.0)]
    assert count_false(splice, [{3, 4}, {3, 4}]) == 1


def test_gate_withholds_values_below_the_threshold():
    atts = [Attribution(1, "decoded", 2.0, best=1), Attribution(2, "decoded", 5.0, best=2)]
    out = gate(atts, 3.0)
    assert out[0].user is None and out[0].status == "absent" and out[0].best == 1
    assert out[1].user == 2
    assert gate(atts, None) == atts


def test_reliability_bins_compare_confidence_with_accuracy():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 20000)
    calibrated = rng.uniform(0, 1, conf.size) < conf
    rows = metrics.reliability(conf, calibrated, bins=10)
    assert len(rows) == 10 and sum(r["n"] for r in rows) == conf.size
    assert max(r["gap"] for r in rows) < 0.03
    overconfident = rng.uniform(0, 1, conf.size) < conf / 2
    assert max(r["gap"] for r in metrics.reliability(conf, overconfident)) > 0.4
    p = metrics.proportion(3, 10)
    assert p["p"] == 0.3 and p["lo"] < 0.3 < p["hi"]


# -- payload layout and release rules -------------------------------------------------------------------
def test_payload_layout_puts_user_in_level_two_and_bits_12_to_23():
    hero = build_attr_method(HERO_V1, 0)
    bits = payload_for(hero, 0, 0xABC)
    assert hero.fields(bits) == {"model": model_value(0), "user": 0xABC}
    mpac = build_attr_method("MPAC(2)", 0)
    bits = payload_for(mpac, 0, 0xABC)
    assert len(bits) == 24 and _bits_to_int(bits[12:]) == 0xABC and _bits_to_int(bits[:12]) == model_value(0)


def _synthetic(processor, steps: int, batch: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, 1), generator=g)
    for _ in range(steps):
        logits = torch.randn(batch, vocab, generator=g) * 3.0
        scores = processor(ids, logits)
        tok = torch.multinomial(torch.softmax(scores.double(), -1), 1, generator=g)
        ids = torch.cat([ids, tok], 1)
    return ids[:, 1:].tolist()


@pytest.mark.parametrize("name", [HERO_V1, HERO_V2])
def test_hero_adapters_recover_users_and_release_nothing_on_random_text(name):
    """The adapter reads `user` from level 2 of both profiles; on random text nothing is released."""
    hero = build_attr_method(name, 0)
    users = [0x123, 0xFED, 0x0F0, 0xA5A]
    proc = hero.processor([payload_for(hero, 0, u) for u in users], 1)
    ids = _synthetic(proc, 300, len(users), hero.profile.vocab_size, 1)
    att = attribute(hero, ids)
    assert count_exact(att, users) == len(users)
    assert all(a.confidence is not None and a.confidence > 0.5 for a in att)
    random_text = torch.randint(0, hero.profile.vocab_size, (8, 200), generator=torch.Generator().manual_seed(2))
    null = attribute(hero, random_text.tolist())
    assert count_false(null, [set()] * 8) == 0 and {a.status for a in null} == {"absent"}


def test_hero_applies_the_sampling_warpers_itself():
    """Under top-k 1 the HeRo sampler must return the argmax token (its draw happens after the warpers)."""
    hero = build_attr_method(HERO_V1, 0)
    greedy = Sampling("k1", top_k=1)
    proc = hero.processor([payload_for(hero, 0, 5)] * 2, 3, greedy.warpers())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, hero.profile.vocab_size, (2, 8), generator=g)
    for _ in range(6):
        logits = torch.randn(2, hero.profile.vocab_size, generator=g)
        out = proc(ids, logits.clone())
        tok = out.argmax(-1)
        assert torch.equal(tok, logits.argmax(-1))
        ids = torch.cat([ids, tok.unsqueeze(1)], 1)


# -- collusion statistics -------------------------------------------------------------------------------
def test_linkage_statistic_separates_deterministic_users():
    """Texts of one 'user' follow a fixed context -> token map; other users and plain text do not."""
    rng = np.random.default_rng(0)
    vocab, h = 12, 2

    def text(table, n=120):
        ids = list(rng.integers(0, vocab, h))
        for _ in range(n):
            ctx = tuple(ids[-h:])
            ids.append(table[ctx] if table is not None and rng.uniform() < 0.9 else int(rng.integers(0, vocab)))
        return ids

    tables = [{(a, b): int(rng.integers(0, vocab)) for a in range(vocab) for b in range(vocab)} for _ in range(6)]
    texts, accounts = [], []
    for acc, t in enumerate(tables):
        for _ in range(4):
            texts.append(text(t))
            accounts.append(acc)
    xs, ys, shared, _ = col.pair_scores(texts, accounts, set(range(6)), h)
    assert col.auc(xs, ys) > 0.95 and min(shared) > 0
    plain = [text(None) for _ in texts]
    px, py, _, _ = col.pair_scores(plain, accounts, set(range(6)), h)
    assert abs(col.auc(px, py) - 0.5) < 0.15
    thr = col.fit_threshold(xs, ys)
    assert col.balanced_accuracy(xs, ys, thr)[0] > 0.9


# -- cache key ----------------------------------------------------------------------------------------------
def test_sampling_setting_is_part_of_the_cache_key(tmp_path):
    from hero_eval.generation import GenerationCache

    cache = GenerationCache(tmp_path, None, None, 0, 8, None)
    m = build_attr_method("MPAC(2)", 0)
    t1, prov = cache.path(m, 200, T1, "_user12"), cache.path(m, 200, PROVIDER, "_user12")
    assert t1 != prov and "k50p0.9" in prov.name
    assert cache.path(m, 200, T1).name == "MPAC_2__24b_200t.jsonl"  # earlier runs' T = 1 files stay valid
    assert PROVIDER.generate_kwargs() == {"temperature": 1.0, "top_k": 50, "top_p": 0.9}


# -- end to end (small) ---------------------------------------------------------------------------------------
@pytest.mark.model
@pytest.mark.slow
def test_attribution_section_end_to_end(hero_home, smollm2, tmp_path):
    from hero_eval.report import write_report
    from hero_eval.runner import QUICK_ATTR_PLAN, Config, Runner

    model, tok = smollm2
    cfg = Config(
        seed=0,
        prompts=6,
        small=6,
        humans=24,
        tokens=40,
        batch_size=6,
        sections=("attribution",),
        attr_methods=(HERO_V2, HERO_V1, "MPAC(2)", "unwatermarked"),
        out=str(tmp_path / "out"),
        attr_plan={**QUICK_ATTR_PLAN, "col_users": 4, "col_prompts": 2, "col_tokens": 32},
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as `hero eval` runs: more threads than free cores make generation crawl
    try:
        res = Runner(cfg, model, tok).run()
    finally:
        torch.set_num_threads(threads)
    assert not res.get("errors"), res.get("errors")
    att = res["cells"]["attribution"]
    for s in ("T1", "k50p0.9"):
        for name in (HERO_V2, HERO_V1):
            c = att[s][name]
            assert c["n"] == 6 and set(c["prefix"]) == {"25", "40"}
            assert c["fa_human"]["n"] == 24 and c["fa_human"]["k"] == 0  # nothing named on human text
            assert c["splices"]["0.5"]["n"] + c["splices"]["0.5"]["skipped_equal_users"] == 6
        assert "release_threshold" in att[s]["MPAC(2)"]
    div = att["diversity"]["k50p0.9"]
    assert div[HERO_V1]["repeat_distinct_outputs"]["mean"] == 1.0  # v1: identical outputs under a fixed key
    assert div[HERO_V2]["repeat_distinct_outputs"]["mean"] > 1.0  # v2: fresh randomness for the opening
    assert div["unwatermarked"]["repeat_distinct_outputs"]["mean"] > 1.0
    assert att["collusion"][HERO_V1]["framing"]["n"] == 2 * 1 * 2 * 2  # ordered member pairs x prompts x ratios
    assert att["decode_cost"]["us_per_token"]
    readme = write_report(res, tmp_path / "out")
    text = readme.read_text()
    assert "## Attribution you can stand behind" in text and "### Diversity" in text
    assert (tmp_path / "out" / "attribution_exact_vs_tokens.png").exists()
    json.dumps(res)  # results stay serialisable
