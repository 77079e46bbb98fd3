"""Measurements of the attribution section (issue 11, "Must show"), per sampling setting and method.

Every figure is computed on text as a verifier receives it: generator token ids (prefixes, attacked
ids, splices) are detokenised and re-tokenised. Rates are k of n with Wilson 95% intervals; medians
come with bootstrap intervals (metrics.median_ci).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hero_eval import attacks, metrics
from hero_eval.attribution import (
    Attribution,
    attribute,
    count_exact,
    count_false,
    gate,
    model_truth,
    user_value,
)
from hero_eval.methods import UNWATERMARKED, VOCAB, BaselineMethod, HeroMethod, Method, ModelAwareMethod
from hero_eval.splices import build_splices, classify

PREFIXES = (25, 50, 100, 200)
REPLACE = (0.1, 0.2)
RATIOS = (0.5, 0.8)
DETECT_TOKENS = 50  # detection TPR is reported on the first 50 tokens (it saturates at 200)
FA_FPR = 1e-3
V1_OLD_ENGINE = "HeRo-v1 (engine before v2)"
V1_ENGINE_FILE = (
    "attribution_v1_engine.json"  # baselines release a value only above the human-text threshold at this FPR
)


def evaluate(sec) -> None:
    from hero_eval import attribution_extra

    r = sec.r
    out = r.results["cells"].setdefault("attribution", {})
    out["plan"] = {
        **sec.plan.__dict__,
        "settings": [s.name for s in sec.settings],
        "methods": list(sec.methods),
        "texts": {f"{n}@{s.name}": sec.texts(n, s.name) for n in sec.methods for s in sec.settings},
    }
    old = _v1_engine_rows(Path(r.cfg.out))
    for s in sec.settings:
        cell = out.setdefault(s.name, {"describe": s.describe()})
        unw = sec.methods.get(UNWATERMARKED)
        unw_recs = sec.data.main(unw, s, range(sec.texts(UNWATERMARKED, s.name))) if unw is not None else None
        for name, m in sec.methods.items():
            r.say(f"attribution: evaluating {name} under {s.name}")
            recs = sec.data.main(m, s, range(sec.texts(name, s.name)))
            if name == UNWATERMARKED:
                cell[name] = {
                    "n": len(recs),
                    "ppl": metrics.median_ci([x["gen_ppl"] for x in recs]),
                    "gen_ppl": [x["gen_ppl"] for x in recs],
                }
            else:
                cell[name] = MethodEval(sec, m, recs, unw_recs).run()
            r.save()
        if s.name in old:
            cell[V1_OLD_ENGINE] = old[s.name]
    for part in ("diversity", "collusion", "decode_cost"):
        if (part == "collusion" and not sec.plan.col_users) or (part == "decode_cost" and not sec.plan.cost_texts):
            continue
        if r.over_budget():
            r.results["skipped"].append(f"attribution:{part}")
            continue
        r.say(f"attribution: {part}")
        out[part] = (attribution_extra.decode_cost(sec, texts=sec.plan.cost_texts) if part == "decode_cost"
                     else getattr(attribution_extra, part)(sec))
        r.save()
    if "decode_cost" in old and "decode_cost" in out:
        out["decode_cost"]["v1_engine"] = old["decode_cost"]


def _ks_uniform(atts: Sequence[Attribution]) -> dict:
    """Calibration on human text (no key ever touched it): the whole-text and the `user`-level p-values
    against Uniform(0, 1), Kolmogorov-Smirnov; undecodable texts (too short) are left out."""

    out: dict = {}
    for name, vals in (("text", [a.score for a in atts if a.status != "undecodable"]),
                       ("user_level", [-a.extra["level_log10_p"] for a in atts if "level_log10_p" in a.extra])):
        p = [10.0 ** -v for v in vals]
        if p:
            out[name] = ks_uniform(p)
    return out


def ks_uniform(p: Sequence[float]) -> dict:
    """KS against Uniform(0, 1), two-sided and each side: `ks_p_small` tests for too many small p-values (the
    anti-conservative side, the one that would make false alarms), `ks_p_large` for too few (conservative: a
    departure there costs power, never calibration); plus the observed rates at 1e-2 and 1e-1."""
    from scipy import stats as sps

    two = sps.kstest(p, "uniform")
    return {"n": len(p), "ks_statistic": float(two.statistic), "ks_p": float(two.pvalue),
            "ks_p_small": float(sps.kstest(p, "uniform", alternative="greater").pvalue),
            "ks_p_large": float(sps.kstest(p, "uniform", alternative="less").pvalue),
            "p_le_0.01": sum(x <= 1e-2 for x in p) / len(p), "p_le_0.1": sum(x <= 0.1 for x in p) / len(p)}


def _v1_engine_rows(folder: Path) -> dict:
    """Rows of the v1 profile decoded by the engine before spec v2, saved by
    research/eval_v1_engine_rows.py (that engine is gone from this tree); {} when absent."""
    path = folder / V1_ENGINE_FILE
    return json.loads(path.read_text()) if path.exists() else {}


class MethodEval:
    """All main-cell figures of one method under one sampling setting."""

    def __init__(self, sec, m: Method, recs: list[dict], unw_recs: list[dict] | None) -> None:
        self.sec, self.r, self.m = sec, sec.r, m
        self.recs, self.unw = recs, unw_recs
        self.seed = sec.r.cfg.seed
        self.users = [user_value(self.seed, x["i"]) for x in recs]
        self.model = model_truth(m, self.seed)
        self.baseline = isinstance(m, BaselineMethod)
        self.tokens = sec.plan.tokens
        self.points: list[tuple[float, bool]] = []  # (confidence, exactly right) of released values

    def seen(self, id_lists: Sequence[Sequence[int]]) -> list[list[int]]:
        """Token ids -> text -> ids, as a verifier receives the text."""
        tok = self.r.tok
        return self.r.retok([tok.decode(list(x), skip_special_tokens=True) for x in id_lists])

    def attribute(self, ids: list[list[int]], t: int) -> list[Attribution]:
        return gate(attribute(self.m, ids), self.threshold.get(t) if self.baseline else None)

    def run(self) -> dict:
        res: dict = {"n": len(self.recs), "tokens": self.tokens}
        self._humans(res)
        self.prefixes = [t for t in PREFIXES if t < self.tokens] + [self.tokens]
        # longest first: a model-aware method re-uses the LM pass of the whole text for its prefixes
        done = {t: self._exact(self.seen([x["ids"][:t] for x in self.recs]), t) for t in sorted(self.prefixes)[::-1]}
        res["prefix"] = {str(t): done[t] for t in self.prefixes}
        res["tpr50"] = metrics.tpr_at_fpr(self._scores50, [a.score for a in self.human[self.detect_t]], FA_FPR)
        res["detect_tokens"] = self.detect_t
        if self.m.name in getattr(self.sec, "light_methods", ()):  # exact rows only (the chat section's model-aware)
            res["ppl"] = metrics.median_ci([x["gen_ppl"] for x in self.recs])
            return res
        res["replace"] = {str(p): self._exact(self.seen(self._replaced(p)), self.tokens) for p in REPLACE}
        res["splices"] = {str(q): self._splices(q) for q in RATIOS}
        if self.unw is not None:
            att = self.attribute(self.seen([x["ids"] for x in self.unw]), self.tokens)
            res["fa_unwatermarked"] = metrics.proportion(count_false(att, [set()] * len(att)), len(att))
        third = sum(res["splices"][q]["counts"]["third"] for q in res["splices"])
        total = sum(res["splices"][q]["n"] for q in res["splices"])
        res["fa_splices"] = metrics.proportion(third, total)
        ppl = [x["gen_ppl"] for x in self.recs]
        res["gen_ppl"], res["ppl"] = ppl, metrics.median_ci(ppl)
        if isinstance(self.m, HeroMethod | ModelAwareMethod) and self.points:
            res["reliability"] = metrics.reliability([c for c, _ in self.points], [ok for _, ok in self.points])
            res["reliability_n"] = len(self.points)
        return res

    def _humans(self, res: dict) -> None:
        """Human texts at 50 (detection) and full length (false attribution); baselines' release thresholds."""
        self.detect_t = min(DETECT_TOKENS, self.tokens)
        self.human = {t: self._human(t) for t in sorted({self.detect_t, self.tokens})[::-1]}
        self.threshold: dict[int, float] = {}
        if self.baseline:
            for t in [t for t in PREFIXES if t < self.tokens] + [self.tokens]:
                hs = self._human(t)
                self.threshold[t] = metrics.threshold_at_fpr([a.score for a in hs], FA_FPR)
            res["release_threshold"] = {str(t): v for t, v in self.threshold.items()}
        hs = self.human[self.tokens]
        if self.baseline:  # 2-fold: each half is gated by the threshold set on the other half
            halves = [hs[0::2], hs[1::2]]
            thr = [metrics.threshold_at_fpr([a.score for a in h], FA_FPR) for h in halves]
            released = gate(halves[0], thr[1]) + gate(halves[1], thr[0])
        else:
            released = hs
        res["fa_human"] = metrics.proportion(count_false(released, [set()] * len(released)), len(released))
        res["human_status"] = dict(Counter(a.status for a in released))
        if not self.baseline:
            res["human_p_uniform"] = _ks_uniform(hs)



    def _human(self, t: int) -> list[Attribution]:
        """The method's results on the human texts cut to t tokens, shared by the sampling settings."""
        key = (self.m.name, t)
        if key not in self.sec.human_cache:
            self.sec.human_cache[key] = attribute(self.m, self.r.human_ids(t)[: self.sec.humans(self.m.name)])
        return self.sec.human_cache[key]

    def _exact(self, ids: list[list[int]], t: int) -> dict:
        raw = attribute(self.m, ids)
        if t == self.detect_t:
            self._scores50 = [a.score for a in raw]
        att = gate(raw, self.threshold.get(t)) if self.baseline else raw
        n = len(att)
        exact = count_exact(att, self.users)
        wrong = count_false(att, [{u} for u in self.users])
        best = sum(a.best == u for a, u in zip(raw, self.users, strict=True))
        for a, u in zip(att, self.users, strict=True):
            if a.user is not None and a.confidence is not None:
                self.points.append((a.confidence, a.user == u))
        return {
            "exact": metrics.proportion(exact, n),
            "wrong": metrics.proportion(wrong, n),
            "best": metrics.proportion(best, n),
            "status": dict(Counter(a.status for a in att)),
            # the public `model` (a moderator's release: level 1's own rule, never level-2 material)
            "model_exact": metrics.proportion(sum(a.model == self.model for a in att), n),
            "model_wrong": metrics.proportion(sum(a.model is not None and a.model != self.model for a in att), n),
        }

    def _replaced(self, p: float) -> list[list[int]]:
        return [attacks.replace(x["ids"], p, VOCAB, random.Random(f"{self.seed}/REP/{p}/{x['i']}")) for x in self.recs]

    def _splices(self, ratio: float) -> dict:
        sp, skipped = build_splices([x["ids"] for x in self.recs], self.users, ratio, self.tokens)
        att = self.attribute(self.seen([s.ids for s in sp]), self.tokens)
        counts = Counter(classify(a.named(), s.users, a.status) for a, s in zip(att, sp, strict=True))
        n = len(sp)
        return {
            "n": n,
            "skipped_equal_users": skipped,
            "counts": {k: counts.get(k, 0) for k in ("both", "one", "none", "third")},
            **{k: metrics.proportion(counts.get(k, 0), n) for k in ("both", "one", "none", "third")},
            "status": dict(Counter(a.status for a in att)),
        }
