"""The attribution section's smaller experiments: diversity, collusion/linkage, decode cost."""

from __future__ import annotations

import time

import numpy as np
import torch

from hero_eval import collusion as col
from hero_eval import metrics
from hero_eval.attribution import attribute
from hero_eval.methods import BaselineMethod, HeroMethod, ModelAwareMethod
from hero_eval.sampling import COLLUSION_SETTING
from hero_eval.splices import classify, splice_ids
from verifier.engine.decoder import Decoder


def _mean_ci(values) -> dict:
    """Mean over prompts with a 95% bootstrap interval (prompts resampled)."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(0)
    boots = v[rng.integers(0, len(v), size=(1000, len(v)))].mean(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi), "values": [float(x) for x in v]}


def diversity(sec) -> dict:
    """Distinct outputs over `repeats` identical requests, and distinct `prefix`-token openings (and first
    tokens) over `users` users on one prompt, per method and setting; plain sampling = unwatermarked."""
    p = sec.plan
    out: dict = {}
    for s in sec.settings:
        for name, m in sec.diversity_methods().items():
            reps = [sec.data.repeats(m, s, k) for k in range(p.div_prompts)]
            users = [sec.data.users(m, s, k) for k in range(p.user_prompts)]
            out.setdefault(s.name, {})[name] = {
                "repeat_distinct_outputs": _mean_ci([len({tuple(r["ids"]) for r in rr}) for rr in reps]),
                "repeat_distinct_first8": _mean_ci([len({tuple(r["ids"][:8]) for r in rr}) for rr in reps]),
                "users_distinct_prefix": _mean_ci([len({tuple(r["ids"][: p.prefix]) for r in uu}) for uu in users]),
                "users_distinct_first_token": _mean_ci([len({r["ids"][0] for r in uu}) for uu in users]),
            }
    return out


def collusion(sec) -> dict:
    """Linkage (pairs of texts: same account or not?) and splice framing, by a group of colluding accounts
    (the first half) against the others, with texts of every account on the same prompts."""
    p, out = sec.plan, {"setting": COLLUSION_SETTING.name}
    members = set(range(p.col_users // 2))
    outsiders = set(range(p.col_users // 2, p.col_users))
    for name, m in sec.diversity_methods().items():
        recs = sec.data.collusion(m, COLLUSION_SETTING)
        texts = sec.r.retok([r["text"] for r in recs])
        accounts = [k // p.col_prompts for k in range(len(recs))]
        res: dict = {"n_texts": len(recs), "accounts": p.col_users, "prompts": p.col_prompts}
        h = 4
        variants = {"keyless": None}
        if isinstance(m, HeroMethod):
            h = m.profile.context_width
            size = m.profile.vocab_size // m.profile.schedule[0]
            variants["level1"] = lambda a, b, size=size: a // size == b // size  # contiguous level-1 chunks
        for vname, same in variants.items():
            tr_x, tr_y, _, _ = col.pair_scores(texts, accounts, members, h, same)
            te_x, te_y, shared, groups = col.pair_scores(texts, accounts, outsiders, h, same)
            thr = col.fit_threshold(tr_x, tr_y)
            bal, tpr, tnr = col.balanced_accuracy(te_x, te_y, thr)
            res[vname] = {
                "train_auc": col.auc(tr_x, tr_y),
                "test_auc": col.auc(te_x, te_y),
                "test_auc_ci": col.bootstrap_auc(te_x, te_y, groups),
                "test_balanced_accuracy": bal,
                "test_tpr": tpr,
                "test_tnr": tnr,
                "test_pairs": {"same": int(sum(te_y)), "different": int(len(te_y) - sum(te_y))},
                "mean_shared_contexts": float(np.mean(shared)) if shared else 0.0,
            }
        if isinstance(m, HeroMethod):
            res["framing"] = _framing(sec, m, recs, accounts, members)
        out[name] = res
    return out


def _framing(sec, m: HeroMethod, recs, accounts, members) -> dict:
    """Members splice two members' answers to the same prompt (50/50 and 80/20, both orders) and submit
    them: count results naming a value no member carries (framing an outsider)."""
    p = sec.plan
    users = {a: sec.data.collusion_user(a) for a in set(accounts)}
    group_values = {users[a] for a in members}
    by = {(accounts[k], k % p.col_prompts): recs[k]["ids"] for k in range(len(recs))}
    spl, pairs = [], []
    for a in sorted(members):
        for b in sorted(members):
            if a == b:
                continue
            for q in range(p.col_prompts):
                for ratio in (0.5, 0.8):
                    spl.append(splice_ids(by[(a, q)], by[(b, q)], ratio, p.col_tokens))
                    pairs.append((users[a], users[b]))
    tok = sec.r.tok
    att = attribute(m, sec.r.retok([tok.decode(x, skip_special_tokens=True) for x in spl]))
    kinds = [classify(x.named(), pr, x.status) for x, pr in zip(att, pairs, strict=True)]
    outsider = sum(bool(x.named() - group_values) for x in att)
    return {
        "n": len(spl),
        "third_party": metrics.proportion(kinds.count("third"), len(spl)),
        "outside_group": metrics.proportion(outsider, len(spl)),
        "both": metrics.proportion(kinds.count("both"), len(spl)),
        "one": metrics.proportion(kinds.count("one"), len(spl)),
        "none": metrics.proportion(kinds.count("none"), len(spl)),
    }


def decode_cost(sec, texts: int = 100, rounds: int = 3, aware_texts: int = 20) -> dict:
    """CPU decode time per token: moderator (level-1 tables only) and auditor (all levels), per HeRo profile,
    model-aware auditors (LM re-run + weighted decode, on the first `aware_texts` texts: about a CPU-second
    per text), baselines for reference; rounds interleaved; token ids in (tokenisation excluded)."""
    ids = sec.r.human_ids(sec.plan.tokens)[:texts]
    runs: dict[str, list[float]] = {}
    jobs = {}
    for name, m in sec.methods.items():
        if isinstance(m, HeroMethod):
            t1 = {1: [m.keyset.tables[0]]}
            jobs[f"{name} moderator (level 1)"] = (Decoder(m.profile, t1).decode_ids, ids)
            jobs[f"{name} auditor (all levels)"] = (m._decoder.decode_ids, ids)
        elif isinstance(m, ModelAwareMethod):
            jobs[f"{name} auditor (all levels)"] = (lambda x, m=m: m.decode_ids(x, remember=False), ids[:aware_texts])
        elif isinstance(m, BaselineMethod):
            jobs[f"{name} (whole payload)"] = (m.decode, ids)
    for _ in range(rounds):
        for label, (fn, batch) in jobs.items():
            t = time.perf_counter()
            fn(batch)
            runs.setdefault(label, []).append(1e6 * (time.perf_counter() - t) / sum(len(x) for x in batch))
    return {
        "tokens": sum(len(x) for x in ids),
        "texts": len(ids),
        "texts_model_aware": min(aware_texts, len(ids)),
        "rounds": rounds,
        "us_per_token": {k: sorted(v)[len(v) // 2] for k, v in runs.items()},
        "all": runs,
        "torch_threads": torch.get_num_threads(),
    }
