"""`hero eval --sections chat`: the main setting. Assistant answers to instruction prompts (issue 46).

SmolLM2-135M-Instruct answers the requests of data/chat_prompts.jsonl through its chat template; HeRo (one
method per `--profile`, decoded model-free and model-aware), SynthID-Text (transformers' processor) and plain
sampling answer the same prompts under the same sampling (`--chat-settings`, default top-k 50 / top-p 0.9).
BBC continuations are the second corpus (`--chat-corpora chat bbc`).

The attribution section's machinery measures HeRo's rows (exact `user`, public `model`, wrong values, splices,
human texts, diversity, decode cost) through a view of the runner that carries this section's prompts, cache
folder and results node; this module adds what the chat report needs beside them: detection at 50 tokens as
a moderator reads it (level-1 keys only), SynthID's binomial test with its calibration, answers at their
natural length, entropy and paired perplexity. Every figure is printed beside its texts' median perplexity
and mean per-token entropy (report_chat.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from hero_eval import metrics
from hero_eval.attribution import SYNTHID, hero_name, user_value
from hero_eval.attribution_section import AttributionSection
from hero_eval.generation import GenerationCache
from hero_eval.methods import UNWATERMARKED, HeroMethod, ModelAwareMethod, SynthIDMethod
from hero_eval.sampling import SETTINGS, Sampling

CORPORA = ("chat", "bbc")
ALPHA_DETECT = 1e-3  # detection: p <= 1e-3 (and TPR at an empirical FPR of 1e-3 on human texts)
WRONG_KEYS = 9  # SynthID key sets that made none of the texts (calibration: texts x WRONG_KEYS tests)
CUTS = (50, 100, 200)

# Chat defaults of the attribution machinery's small experiments: 20 identical requests of 50 tokens on 4
# prompts (distinct outputs), one prompt x 8 users (openings), no collusion (the attribution section has it).
CHAT_PLAN = dict(div_prompts=4, repeats=20, div_tokens=50, users=8, user_prompts=1, prefix=8, col_users=0,
                 cost_texts=50)


def chat_template(tok, prompts: Sequence[str]) -> list[str]:
    """Each request as the model's chat template renders a single user turn, ready for the assistant's answer
    (the strings are tokenised without added special tokens: the template writes its own)."""
    return [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts]


def corpus_prompts(runner, corpus: str, n: int) -> list[str]:
    """The first `n` prompts of a corpus as the generator receives them."""
    if corpus == "chat":
        from hero_eval.chat_prompts import chat_prompts

        items = chat_prompts("eval")
        if n > len(items):
            raise ValueError(f"the chat corpus has {len(items)} evaluation prompts, {n} asked")
        return chat_template(runner.tok, [p.prompt for p in items[:n]])
    if corpus == "bbc":
        return list(runner.prompts[:n])
    raise ValueError(f"unknown corpus {corpus!r}; choose from {list(CORPORA)}")


class RunnerView:
    """The runner as the attribution machinery sees it, with this section's prompts, generation cache and
    results node (results.json stays one file; the save is the runner's)."""

    def __init__(self, runner, corpus: str, cfg, node: dict) -> None:
        self._r = runner
        self.cfg, self.model, self.tok = cfg, runner.model, runner.tok
        self.prompts = corpus_prompts(runner, corpus, cfg.prompts)
        self.cache = runner.cache / f"chat-{corpus}"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.gen_cache = GenerationCache(self.cache, runner.model, runner.tok, cfg.seed, cfg.batch_size, runner.log)
        self.results = {"cells": node, "skipped": runner.results["skipped"]}
        self.human_bodies = runner.human_bodies

    def __getattr__(self, name: str):  # say, save, retok, human_ids, over_budget, t0, log: the runner's
        return getattr(self._r, name)


def chat_config(cfg):
    """The runner's config as the attribution machinery reads it for the chat section."""
    methods: list[str] = []
    for p in cfg.profiles:
        methods += [hero_name(p), hero_name(p) + ModelAwareMethod.SUFFIX]
    methods += [SYNTHID, UNWATERMARKED]
    caps = dict(cfg.attr_caps or {})
    for p in cfg.profiles:  # a model-aware decode re-runs the LM (a CPU-second per text): 200 humans by default
        base, aware = hero_name(p), hero_name(p) + ModelAwareMethod.SUFFIX
        caps.setdefault(f"{aware}@humans", cfg.chat_aware_humans)
        for key in [k for k in caps if k == base or k.startswith(base + "@")]:  # it reads its base's texts
            caps.setdefault(aware + key[len(base):], caps[key])
    plan = {**CHAT_PLAN, **(cfg.attr_plan or {})}
    return dataclasses.replace(cfg, settings=tuple(cfg.chat_settings), attr_methods=tuple(methods),
                               attr_caps=caps, attr_plan=plan)


class ChatSection:
    def __init__(self, runner) -> None:
        self.r = runner

    def run(self) -> None:
        cfg = self.r.cfg
        root = self.r.results["cells"].setdefault("chat", {})
        for corpus in cfg.chat_corpora:
            node = root.setdefault(corpus, {})
            view = RunnerView(self.r, corpus, chat_config(cfg), node)
            CorpusRun(view, corpus).run()
            self.r.save()


class CorpusRun:
    """One corpus: generation (main, natural length, diversity), then the measurements."""

    def __init__(self, view: RunnerView, corpus: str) -> None:
        self.v, self.corpus = view, corpus
        self.sec = AttributionSection(view)
        self.sec.light_methods = {n for n in self.sec.methods if n.endswith(ModelAwareMethod.SUFFIX)}
        self.synthid = self.sec.methods.get(SYNTHID)
        if isinstance(self.synthid, SynthIDMethod):
            self.synthid.eos_token_id = view.tok.eos_token_id
        self.settings: list[Sampling] = [SETTINGS[s] for s in view.cfg.settings]
        self.seed = view.cfg.seed

    # -- generation --------------------------------------------------------------------------------------
    def natural(self, m, s: Sampling, n: int | None = None) -> list[dict]:
        """Answers at their natural length (EOS, at most `natural_tokens`) to the first `natural_prompts`."""
        cfg = self.v.cfg
        sec = self.sec
        n = min(cfg.natural_prompts, sec.texts(m.name, s.name)) if n is None else n
        if sec.data.read_only:  # --measure-only: what another process has cached, nothing generated here
            have = self.v.gen_cache.load(self.v.gen_cache.path(m, cfg.natural_tokens, s, sec.data._scheme(m), True))
            return [have[i] for i in range(n) if i in have]
        return self.v.gen_cache.get(m, self.v.prompts[:n], cfg.natural_tokens, f"natural {s.name}",
                                    lambda i: _payload(sec, m, i), sampling=s, scheme=sec.data._scheme(m),
                                    natural=True)

    def generate(self) -> None:
        self.v.say(f"chat ({self.corpus}): generation")
        self.sec.generate_all()
        if self.v.cfg.natural_prompts:
            for s in self.settings:
                for name, m in self.sec.generators().items():
                    self.v.say(f"chat ({self.corpus}): natural-length answers {name} {s.name}")
                    self.natural(m, s)
        if self.synthid is not None:
            for s in self._synthid_settings():
                for k in range(self.sec.plan.div_prompts):
                    self.sec.data.repeats(self.synthid, s, k)

    # -- measurement -------------------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.v.cfg
        if not cfg.measure_only:
            self.generate()
        else:
            self.sec.data.read_only = True
        if cfg.generate_only:
            return
        from hero_eval import attribution_eval

        # SynthID has no payload: the attribution rows are HeRo's (and plain sampling's perplexity)
        synth = self.sec.methods.pop(SYNTHID, None)
        attribution_eval.evaluate(self.sec)
        if synth is not None:
            self.sec.methods[SYNTHID] = synth
        node = self.v.results["cells"]
        node["attribution"]["diversity_synthid"] = self._synthid_diversity()
        if cfg.chat_cost_rounds:
            self.v.say(f"chat ({self.corpus}): generation cost (CPU time, methods interleaved)")
            node["generation_cost"] = {s.name: self.generation_cost(s, cfg.chat_cost_rounds) for s in self.settings}
            self.v.save()
        for s in self.settings:
            extra = node.setdefault("extra", {}).setdefault(s.name, {"describe": s.describe()})
            plain = self.sec.data.main(self.sec.methods[UNWATERMARKED], s, range(self.sec.texts(UNWATERMARKED, s.name)))
            extra[UNWATERMARKED] = self._texts(plain) | {"natural": self._natural_plain(s)}
            for name, m in self.sec.methods.items():
                if name == UNWATERMARKED:
                    continue
                self.v.say(f"chat ({self.corpus}): {name} {s.name}: detection, natural length, paired perplexity")
                if not self.sec.texts(name, s.name):
                    continue
                recs = self.sec.data.main(m, s, range(self.sec.texts(name, s.name)))
                cell = self._texts(recs) | {"ppl_vs_plain": paired_ppl(recs, plain)}
                if isinstance(m, SynthIDMethod):
                    cell |= self._synthid(m, s, recs)
                elif isinstance(m, HeroMethod):
                    cell |= self._hero(m, s, recs)
                elif isinstance(m, ModelAwareMethod):
                    cell |= self._aware(m, recs)
                extra[name] = cell
                self.v.save()

    def generation_cost(self, s: Sampling, rounds: int, batch: int = 8, steps: int = 32) -> dict:
        """CPU seconds per generated token (this process's CPU time, one torch thread: a shared machine's load
        does not count) of every generator and of SynthID's stock processor, rounds interleaved, uncached."""
        import time

        from hero_eval.generation import generate_rows
        from hero_eval.methods import SynthIDMethod as _S

        gens = dict(self.sec.generators())
        if self.synthid is not None:
            stock = _S(f"{SYNTHID} (stock processor)", self.seed)
            stock.processor = lambda payloads, seed, warpers=None: _stock_processor(stock.keys, warpers)
            gens[stock.name] = stock
        runs: dict[str, list[float]] = {n: [] for n in gens}
        for rd in range(rounds):
            prompts = [self.v.prompts[(rd * batch + j) % len(self.v.prompts)] for j in range(batch)]
            for name, m in gens.items():
                pays = [_payload(self.sec, m, rd * batch + j) for j in range(batch)]
                t = time.process_time()
                generate_rows(self.v.model, self.v.tok, m, prompts, pays, steps, 1000 + rd, s)
                runs[name].append(1000 * (time.process_time() - t) / (batch * steps))
        med = {n: sorted(v)[len(v) // 2] for n, v in runs.items()}
        base = med.get(UNWATERMARKED)
        return {"cpu_ms_per_token": med, "all": runs, "batch": batch, "steps": steps, "rounds": rounds,
                "vs_plain": {n: v / base for n, v in med.items()} if base else {}}

    def _texts(self, recs: list[dict]) -> dict:
        ppl = [r["gen_ppl"] for r in recs]
        ent = [r["entropy"] for r in recs if "entropy" in r]
        return {
            "n": len(recs),
            "ppl": metrics.median_ci(ppl),
            "entropy": _mean(ent),
            "gen_ms_per_token": 1000 * float(np.mean([r["gen_s_per_token"] for r in recs])) if recs else None,
        }

    def seen(self, recs: Sequence[dict], t: int | None) -> list[list[int]]:
        tok = self.v.tok
        return self.v.retok([tok.decode(r["ids"][:t] if t else r["ids"], skip_special_tokens=True) for r in recs])

    def _detect(self, pos: list[float], neg: list[float]) -> dict:
        """Detection at p <= 1e-3 (scores are -log10 p) and TPR at FPR 1e-3 set on the human texts' scores."""
        k = sum(x >= -math.log10(ALPHA_DETECT) for x in pos)
        fp = sum(x >= -math.log10(ALPHA_DETECT) for x in neg)
        return {"p_le_alpha": metrics.proportion(k, len(pos)), "tpr_at_fpr": metrics.tpr_at_fpr(pos, neg, ALPHA_DETECT),
                "human_p_le_alpha": metrics.proportion(fp, len(neg))}

    def _humans(self, decode, t: int, cap: int | None = None) -> list[float]:
        ids = self.v.human_ids(t)
        return [d.score for d in decode(ids[:cap] if cap else ids)]

    def _hero(self, m: HeroMethod, s: Sampling, recs: list[dict]) -> dict:
        """Moderator (level-1 keys only) and auditor detection, model-free, at 50/100/200 tokens; natural length."""
        from verifier.engine.decoder import Decoder

        moderator = Decoder(m.profile, {1: [m.keyset.tables[0]]})

        def mod_scores(ids):
            from hero_eval.methods import _decode_safe

            return [0.0 if r is None else -r.log10_p_value for r in _decode_safe(moderator, ids)]

        out: dict = {"moderator": {}, "auditor": {}}
        for t in CUTS:
            if t > self.sec.plan.tokens:
                continue
            ids = self.seen(recs, t)
            hum = self.v.human_ids(t)
            out["moderator"][str(t)] = self._detect(mod_scores(ids), mod_scores(hum))
            out["auditor"][str(t)] = self._detect([d.score for d in m.decode(ids)], [d.score for d in m.decode(hum)])
        nat = self._natural_recs(m, s)
        if nat:
            ids = self.seen(nat, None)
            sc = mod_scores(ids)
            out["natural"] = _natural_summary(nat, sc) | {"auditor_p_le_alpha": metrics.proportion(
                sum(d.score >= 3 for d in m.decode(ids)), len(ids))}
        return out

    def _aware(self, m: ModelAwareMethod, recs: list[dict]) -> dict:
        """Auditor detection model-aware at 50 tokens (humans capped as in the attribution rows)."""
        from hero_eval.attribution import attribute

        ids = self.seen(recs, 50)
        pos = [a.score for a in attribute(m, ids)]
        neg = [a.score for a in attribute(m, self.v.human_ids(50)[: self.sec.humans(m.name)])]
        return {"auditor": {"50": self._detect(pos, neg)}}

    def _natural_recs(self, m, s: Sampling) -> list[dict]:
        if not self.v.cfg.natural_prompts:
            return []
        try:
            return self.natural(m, s)
        except RuntimeError:
            return []

    def _natural_plain(self, s: Sampling) -> dict | None:
        nat = self._natural_recs(self.sec.methods[UNWATERMARKED], s)
        return _natural_summary(nat, None) if nat else None

    def _synthid(self, m: SynthIDMethod, s: Sampling, recs: list[dict]) -> dict:
        """SynthID detection at 50/100/200 tokens, its calibration (wrong keys, human texts), natural length."""
        out: dict = {"detect": {}, "test": "binomial: g = 1 count over unmasked (token, layer) entries, one-sided",
                     "p0": m.detector.p0}
        for t in CUTS:
            if t > self.sec.plan.tokens:
                continue
            ids = self.seen(recs, t)
            out["detect"][str(t)] = self._detect([d.score for d in m.decode(ids)], self._humans(m.decode, t))
        full = self.seen(recs, None)
        wrong_p: list[float] = []
        for k in range(WRONG_KEYS):
            w = SynthIDMethod(f"{SYNTHID} wrong{k}", self.seed, salt=f"wrong{k}", eos_token_id=m.eos_token_id)
            wrong_p += [10.0 ** -d.score for d in w.decode(full)]
        hum_p = [10.0 ** -x for x in self._humans(m.decode, self.sec.plan.tokens)]
        out["calibration"] = {"wrong_keys": _calibration(wrong_p), "humans": _calibration(hum_p),
                              "wrong_key_sets": WRONG_KEYS}
        nat = self._natural_recs(m, s)
        if nat:
            out["natural"] = _natural_summary(nat, [d.score for d in m.decode(self.seen(nat, None))])
        return out

    def _synthid_settings(self) -> list[Sampling]:
        """The settings SynthID runs in: all but those capped to 0 texts (`--attr-cap SynthID-Text@T0.7=0`: without
        top-k its stock processor scores the whole vocabulary at every step, ~10x plain generation on CPU)."""
        return [s for s in self.settings if self.sec.texts(SYNTHID, s.name) > 0]

    def _synthid_diversity(self) -> dict:
        out: dict = {}
        if self.synthid is None:
            return out
        p = self.sec.plan
        for s in self._synthid_settings():
            reps = [self.sec.data.repeats(self.synthid, s, k) for k in range(p.div_prompts)]
            out[s.name] = {"repeat_distinct_outputs": [len({tuple(r["ids"]) for r in rr}) for rr in reps],
                           "repeats": p.repeats, "tokens": p.div_tokens}
        return out


def _stock_processor(keys, warpers):
    """transformers' own processor, unmodified, after the warpers (the cost the top-k subclass avoids)."""
    import torch
    from transformers import LogitsProcessorList

    from hero_eval.baselines.synthid import WarpThenWatermark, synthid_config

    wm = synthid_config(keys).construct_processor(vocab_size=0, device=torch.device("cpu"))
    return WarpThenWatermark(warpers or LogitsProcessorList(), wm)


def _payload(sec, m, i: int) -> list[int]:
    from hero_eval.attribution import payload_for

    return payload_for(m, sec.r.cfg.seed, user_value(sec.r.cfg.seed, i))


def _mean(values: Sequence[float]) -> dict:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if not v.size:
        return {"mean": float("nan"), "n": 0}
    return {"mean": float(v.mean()), "sd": float(v.std()), "n": int(v.size)}


def paired_ppl(recs: Sequence[dict], plain: Sequence[dict], n_boot: int = 2000) -> dict:
    """Perplexity against plain sampling on the same prompts: the mean paired difference of log-perplexity
    (method - plain) with a 95% bootstrap interval over prompts; exp of it is the geometric-mean ratio."""
    by = {r["i"]: r["gen_ppl"] for r in plain}
    d = np.asarray([math.log(r["gen_ppl"]) - math.log(by[r["i"]]) for r in recs
                    if r["i"] in by and r["gen_ppl"] > 0 and by[r["i"]] > 0], dtype=float)
    if not d.size:
        return {"n": 0}
    rng = np.random.default_rng(0)
    boots = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"n": int(d.size), "mean_log_ratio": float(d.mean()), "lo": float(lo), "hi": float(hi),
            "ratio": math.exp(float(d.mean())), "ratio_lo": math.exp(float(lo)), "ratio_hi": math.exp(float(hi))}


def _natural_summary(recs: Sequence[dict], scores: Sequence[float] | None) -> dict:
    """Length distribution of natural-length answers, how many ended (EOS) and, with scores, how many are
    detected at p <= 1e-3, overall and by length band."""
    lengths = [r.get("length", len(r["ids"])) for r in recs]
    q = np.percentile(lengths, [10, 25, 50, 75, 90]).tolist() if lengths else []
    out: dict = {
        "n": len(recs),
        "length_quantiles": dict(zip(("p10", "p25", "p50", "p75", "p90"), q, strict=True)),
        "length_mean": float(np.mean(lengths)) if lengths else float("nan"),
        "lengths": lengths,
        "ended": metrics.proportion(sum(bool(r.get("ended", True)) for r in recs), len(recs)),
        "ppl": metrics.median_ci([r["gen_ppl"] for r in recs]),
        "entropy": _mean([r["entropy"] for r in recs if "entropy" in r]),
    }
    if scores is not None:
        hit = [x >= -math.log10(ALPHA_DETECT) for x in scores]
        out["detected"] = metrics.proportion(sum(hit), len(hit))
        bands: dict = {}
        for lo, hi in ((0, 50), (50, 100), (100, 200), (200, 10**9)):
            sel = [h for h, n in zip(hit, lengths, strict=True) if lo <= n < hi]
            bands[f"{lo}-{hi if hi < 10**9 else ''}"] = metrics.proportion(sum(sel), len(sel))
        out["detected_by_length"] = bands
    return out


def _calibration(p: Sequence[float]) -> dict:
    """Null p-values: how many fall at or below 1e-2 and 1e-3, and a Kolmogorov-Smirnov test against
    Uniform(0, 1) (the binomial test is discrete and conservative: the KS p-value reads high)."""
    from hero_eval.attribution_eval import ks_uniform

    n = len(p)
    if not n:
        return {"n": 0}
    return ks_uniform(p) | {"p_le_0.01": metrics.proportion(sum(x <= 1e-2 for x in p), n),
                            "p_le_0.001": metrics.proportion(sum(x <= 1e-3 for x in p), n), "min_p": float(min(p))}

