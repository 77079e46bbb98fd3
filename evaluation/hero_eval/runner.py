"""Orchestration of `hero eval`: sections, fixed seeds, cached generations (resumable), progress bars.

Generations are appended per batch to JSONL files under $HERO_HOME/eval-cache/, keyed by method,
payload size, token budget, schedule and seed, so a crashed or time-limited run resumes where it
stopped. Results go to <out>/results.json after every section, and the report is re-rendered each
time, so a report exists even when a run is cut short.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from hero_eval import (
    SECTIONS,
    attacks,
    metrics,
)
from hero_eval.attribution import ATTR_METHODS
from hero_eval.generation import GenerationCache, generate_rows, slug
from hero_eval.methods import ALL_METHODS, UNWATERMARKED, Method, build_method
from hero_eval.perplexity import score_ppl
from hero_eval.sampling import T1

FPRS = (1e-2, 5e-3, 1e-3, 5e-4)
CORE = ("HeRo2(2,2)", "MPAC(2)", UNWATERMARKED, "BiMark(20)", "HeRo1(3)")
ROBUST_METHODS = ("HeRo1(3)", "HeRo2(2,2)", "MPAC(2)", "BiMark(20)")
LONG_METHODS = ("HeRo2(2,2)", "MPAC(2)", "BiMark(20)", "HeRo1(3)", UNWATERMARKED)
PAYLOAD_METHODS = ("HeRo2(2,2)", "MPAC(2)", "HeRo1(3)", "BiMark(20)")
HIER_BITS = ("HeRo2(1,1)", "HeRo2(2,1)", "HeRo2(2,2)")


# `--quick` sizes of the attribution section's small experiments (CI: seconds of generation each)
QUICK_ATTR_PLAN = dict(
    div_prompts=2,
    repeats=4,
    div_tokens=16,
    users=8,
    user_prompts=2,
    prefix=8,
    col_users=4,
    col_prompts=2,
    col_tokens=48,
)


@dataclass
class Config:
    quick: bool = False
    seed: int = 0
    prompts: int = 16  # main cell (24 bits, 200 tokens)
    small: int = 8  # other cells
    humans: int = 2000
    tokens: int = 200
    batch_size: int = 16
    sections: tuple[str, ...] = SECTIONS
    methods: tuple[str, ...] = ALL_METHODS
    hierarchy_k1: tuple[int, ...] = (5, 10, 20, 40, 80, 160)
    payload_bits: tuple[int, ...] = (12, 48, 36)
    long_tokens: int = 400
    gemma_texts: int = 48
    budget_minutes: float = 0.0  # 0 = no limit; sections starting past it are skipped
    out: str = "docs/evaluation"
    command: str = ""
    threads: int = 0
    settings: tuple[str, ...] = ("T1", "k50p0.9")  # sampling settings of the attribution section
    attr_methods: tuple[str, ...] = ATTR_METHODS
    attr_plan: dict | None = None  # DataPlan overrides (diversity / collusion sizes)
    attr_caps: dict | None = None  # method -> fewer main-cell texts than `prompts` (attribution section)
    generate_only: bool = False  # attribution: fill the generation cache, measure nothing
    measure_only: bool = False  # attribution: measure what the cache holds, generate nothing (beside a generator)
    # chat section (the main setting, issue 46): HeRo profiles compared, sampling settings, corpora
    profiles: tuple[str, ...] = ("v3",)
    chat_settings: tuple[str, ...] = ("k50p0.9",)
    chat_corpora: tuple[str, ...] = ("chat",)
    natural_prompts: int = 100  # answers at their natural length (EOS), per method and setting; 0: none
    natural_tokens: int = 400  # ... cut at this many tokens when no EOS came
    chat_aware_humans: int = 200  # human texts decoded model-aware (an LM pass each)
    chat_cost_rounds: int = 3  # generation cost: interleaved rounds of 8 prompts x 32 tokens per method (0: none)

    @classmethod
    def quick_config(cls, **kw) -> Config:
        base = dict(
            quick=True,
            prompts=32,
            small=8,
            humans=64,
            tokens=64,
            batch_size=32,
            sections=("main",),
            methods=("HeRo2(2,2)", "MPAC(2)", UNWATERMARKED),
            attr_plan=QUICK_ATTR_PLAN,
        )
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)


def cache_root() -> Path:
    home = os.environ.get("HERO_HOME") or "~/.hero"
    return Path(home).expanduser() / "eval-cache"


def payload_bits(seed: int, total_bits: int, i: int) -> list[int]:
    rng = random.Random(f"payload/{seed}/{total_bits}/{i}")
    return [rng.randrange(2) for _ in range(total_bits)]


class Runner:
    def __init__(self, cfg: Config, model, tokenizer, log=None):
        self.cfg = cfg
        self.model = model
        self.tok = tokenizer
        self.log = log or sys.stderr  # looked up per run: a stream bound at import time may be closed since
        self.t0 = time.time()
        self.results: dict = {"config": asdict(cfg), "cells": {}, "skipped": [], "timings": {}}
        from hero_eval.corpus import bbc_prompts_and_humans, prompt_from_article

        n_max = max(cfg.prompts, cfg.small)
        arts, humans = bbc_prompts_and_humans(n_max, cfg.humans, cfg.seed)
        self.prompts = [prompt_from_article(a.text, tokenizer, 50) for a in arts]
        self.human_bodies = [a.body or a.text for a in humans]
        self._human_cache: dict[int, list[list[int]]] = {}
        self.cache = cache_root() / f"seed{cfg.seed}"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.gen_cache = GenerationCache(self.cache, model, tokenizer, cfg.seed, cfg.batch_size, log)
        self._load_previous()

    def _load_previous(self) -> None:
        """Keep cells of an earlier run with the same settings, so `--sections X` re-does only X."""
        cfg = self.cfg
        prev = Path(cfg.out) / "results.json" if cfg.out else None
        if not prev or not prev.exists():
            return
        try:
            old = json.loads(prev.read_text())
        except (OSError, json.JSONDecodeError):
            return
        same = ("seed", "prompts", "small", "humans", "tokens", "quick")
        if all(old.get("config", {}).get(k) == getattr(cfg, k) for k in same):
            self.results["cells"] = old.get("cells", {})
            self.results["commands"] = old.get("commands", [old["config"].get("command", "")])
            self.results["skipped"] = [x for x in old.get("skipped", []) if x.split(":")[0] not in cfg.sections]
            self.results["previous_elapsed_s"] = old.get("elapsed_s", 0) + old.get("previous_elapsed_s", 0)

    # -- helpers ---------------------------------------------------------------------------------
    def say(self, msg: str) -> None:
        print(f"[hero eval {time.time() - self.t0:7.1f}s] {msg}", file=self.log, flush=True)

    def over_budget(self) -> bool:
        return bool(self.cfg.budget_minutes) and (time.time() - self.t0) / 60 > self.cfg.budget_minutes

    def retok(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.tok(t, add_special_tokens=False)["input_ids"] if t.strip() else [] for t in texts]

    def human_ids(self, n_tokens: int) -> list[list[int]]:
        """Human articles cut to the first n_tokens generator tokens, as text, re-tokenised."""
        if n_tokens not in self._human_cache:
            texts = []
            for body in self.human_bodies:
                ids = self.tok(body, add_special_tokens=False)["input_ids"][:n_tokens]
                texts.append(self.tok.decode(ids, skip_special_tokens=True))
            self._human_cache[n_tokens] = self.retok(texts)
        return self._human_cache[n_tokens]

    # -- generation (cached) -----------------------------------------------------------------------
    def generate(self, method: Method, n: int, tokens: int, tag: str) -> list[dict]:
        """The first n prompts, payload bits from `payload_bits`, plain T = 1 (the sections before spec v2)."""
        return self.gen_cache.get(
            method, self.prompts[:n], tokens, tag, lambda i: payload_bits(self.cfg.seed, method.total_bits, i)
        )

    # -- evaluation of one cell ------------------------------------------------------------------
    def evaluate(self, method: Method, recs: list[dict], tokens: int, *, humans: bool = True) -> dict:
        cell: dict = {"method": method.name, "bits": method.total_bits, "tokens": tokens, "n": len(recs)}
        cell["gen_ppl"] = [r["gen_ppl"] for r in recs]
        cell["ppl"] = metrics.median_ci(cell["gen_ppl"])
        cell["gen_ms_per_token"] = 1000 * sum(r["gen_s_per_token"] for r in recs) / len(recs)
        if not method.level_of_bit:
            return cell
        ids = self.retok([r["text"] for r in recs])
        t = time.perf_counter()
        dec = method.decode(ids)
        dt = time.perf_counter() - t
        cell["decode_us_per_token"] = 1e6 * dt / max(1, sum(len(x) for x in ids))
        cell.update(self._bit_stats(method, dec, recs))
        cell["scores"] = [d.score for d in dec]
        if humans:
            hids = self.human_ids(tokens)
            hdec = method.decode(hids)
            cell["human_scores"] = [d.score for d in hdec]
            cell["tpr"] = {str(f): metrics.tpr_at_fpr(cell["scores"], cell["human_scores"], f) for f in FPRS}
        return cell

    def _bit_stats(self, method: Method, dec, recs, prefix: str = "") -> dict:
        allr, pub, priv = [], [], []
        for d, r in zip(dec, recs, strict=True):
            c = metrics.bit_correct(d.bits, r["payload"])
            allr.append(c)
            pub.append([x for x, lv in zip(c, method.level_of_bit, strict=True) if lv == 1])
            priv.append([x for x, lv in zip(c, method.level_of_bit, strict=True) if lv > 1])
        out = {prefix + "bit_acc": metrics.bit_accuracy(allr)}
        if any(priv):
            out[prefix + "public_bit_acc"] = metrics.bit_accuracy(pub)
            out[prefix + "private_bit_acc"] = metrics.bit_accuracy(priv)
        return out

    def put(self, key: str, cell: dict) -> None:
        self.results["cells"][key] = cell
        self.save()

    def save(self) -> None:
        cmds = self.results.setdefault("commands", [])
        if not cmds or cmds[-1] != self.cfg.command:
            cmds.append(self.cfg.command)
        out = Path(self.cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        self.results["elapsed_s"] = time.time() - self.t0
        (out / "results.json").write_text(json.dumps(self.results, indent=1, allow_nan=True))

    # -- sections --------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        for section in cfg.sections:
            if self.over_budget():
                self.results["skipped"].append(section)
                self.say(f"time budget reached: section {section} skipped")
                continue
            self.say(f"section {section}")
            try:
                getattr(self, f"section_{section}")()
            except Exception as exc:  # keep the other sections and the report alive
                import traceback

                self.say(f"section {section} failed: {exc!r}")
                self.results.setdefault("errors", {})[section] = traceback.format_exc()
                if cfg.quick:
                    raise
            self.save()
            if section == "chat" and cfg.out:
                from hero_eval.report_chat import write_chat_report

                write_chat_report(self.results, Path(cfg.out))
            elif not cfg.quick:
                from hero_eval.report import write_report

                write_report(self.results, Path(cfg.out))
        return self.results

    def _main_order(self) -> list[str]:
        core = [m for m in CORE if m in self.cfg.methods]
        return core + [m for m in self.cfg.methods if m not in core]

    def section_main(self) -> None:
        cfg = self.cfg
        for name in self._main_order():
            if self.over_budget():
                self.results["skipped"].append(f"main:{name}")
                continue
            m = build_method(name, 24, cfg.seed)
            assert m is not None
            recs = self.generate(m, cfg.prompts, cfg.tokens, "main")
            cell = self.evaluate(m, recs, cfg.tokens)
            if m.level_of_bit and not cfg.quick:  # bit accuracy vs token budget: prefixes of the same texts
                curve = {}
                for t in (25, 50, 100, 150, 200):
                    if t > cfg.tokens:
                        continue
                    texts = [self.tok.decode(r["ids"][:t], skip_special_tokens=True) for r in recs]
                    dec = m.decode(self.retok(texts))
                    curve[str(t)] = self._bit_stats(m, dec, recs)["bit_acc"]
                    if t == 50:  # TPR saturates at 200 tokens on this model: also report it at 50
                        pos, neg = [d.score for d in dec], [d.score for d in m.decode(self.human_ids(t))]
                        cell["tpr_50"] = {str(f): metrics.tpr_at_fpr(pos, neg, f) for f in FPRS}
                cell["by_tokens"] = curve
            self.put(f"main/{name}", cell)
            self.say(f"{name}: bit_acc={cell.get('bit_acc', {}).get('mean')} ppl={cell['ppl']['median']:.2f}")

    def section_robustness(self) -> None:
        cfg = self.cfg
        for name in ROBUST_METHODS:
            key = f"main/{name}"
            if key not in self.results["cells"]:
                continue
            m = build_method(name, 24, cfg.seed)
            recs = self.generate(m, cfg.prompts, cfg.tokens, "robust")
            res = self._token_attack_accs(m, recs)
            try:
                for p in (0.15, 0.3):
                    texts, fracs = [], []
                    for r in recs:
                        rng = random.Random(f"{cfg.seed}/SYN/{p}/{r['i']}")
                        t, f = attacks.synonym_substitute(r["text"], p, rng)
                        texts.append(t)
                        fracs.append(f)
                    st = self._bit_stats(m, m.decode(self.retok(texts)), recs)["bit_acc"]
                    st["words_changed"] = sum(fracs) / len(fracs)
                    res[f"SYN@{p}"] = st
            except attacks.ThesaurusUnavailable as exc:
                self.say(str(exc))
            self.results["cells"].setdefault("robustness", {})[name] = res
            self.save()
        self._context_width_ablation()

    def _token_attack_accs(self, m: Method, recs: list[dict]) -> dict:
        res: dict = {"clean": self._bit_stats(m, m.decode(self.retok([r["text"] for r in recs])), recs)["bit_acc"]}
        for att, fn in attacks.TOKEN_ATTACKS.items():
            for p in (0.05, 0.1, 0.2):
                texts = []
                for r in recs:
                    rng = random.Random(f"{self.cfg.seed}/{att}/{p}/{r['i']}")
                    texts.append(self.tok.decode(fn(r["ids"], p, 49152, rng), skip_special_tokens=True))
                res[f"{att}@{p}"] = self._bit_stats(m, m.decode(self.retok(texts)), recs)["bit_acc"]
        return res

    def _context_width_ablation(self) -> None:
        """Is HeRo's robustness gap to MPAC the context width? HeRo2(2,2) keyed on h = 1, 2, 4 previous
        tokens vs MPAC(2) (h = 1), same first `small` prompts, same attacks as above."""
        cfg = self.cfg
        out = self.results["cells"].setdefault("ablation_context", {})
        for name, h in (("HeRo2(2,2)", 1), ("HeRo2(2,2)", 2), ("HeRo2(2,2)", 4), ("MPAC(2)", 1)):
            if self.over_budget():
                self.results["skipped"].append(f"ablation:{name}:h={h}")
                continue
            m = build_method(name, 24, cfg.seed, context_width=h)  # baselines ignore context_width
            recs = self.generate(m, cfg.small, cfg.tokens, f"h={h}")
            cell = self._token_attack_accs(m, recs)
            cell |= {"method": name, "h": h, "n": len(recs), "ppl": metrics.median_ci([r["gen_ppl"] for r in recs])}
            out[f"{name}|h={h}"] = cell
            self.save()

    def section_hierarchy(self) -> None:
        cfg = self.cfg
        hier = self.results["cells"].setdefault("hierarchy", {})
        for k1 in cfg.hierarchy_k1:
            for name in HIER_BITS:
                if self.over_budget():
                    self.results["skipped"].append(f"hierarchy:{name}:K1={k1}")
                    continue
                m = build_method(name, 24, cfg.seed, schedule=None if k1 == 20 else (k1,))
                n = cfg.small
                recs = self.generate(m, n, cfg.tokens, f"K1={k1}")
                cell = self.evaluate(m, recs, cfg.tokens, humans=False)
                cell = {k: v for k, v in cell.items() if k not in ("scores", "gen_ppl")}
                cell |= {"k1": k1, "bits_name": name, "by_tokens": {}}
                for t in (50, 100):  # the sweep saturates at 200 tokens: also decode prefixes
                    texts = [self.tok.decode(r["ids"][:t], skip_special_tokens=True) for r in recs]
                    cell["by_tokens"][str(t)] = self._bit_stats(m, m.decode(self.retok(texts)), recs)
                hier[f"{name}|{k1}"] = cell
                self.save()

    def section_payload(self) -> None:
        cfg = self.cfg
        for bits in cfg.payload_bits:
            for name in PAYLOAD_METHODS:
                if name not in cfg.methods:
                    continue
                if self.over_budget():
                    self.results["skipped"].append(f"payload:{name}:{bits}")
                    continue
                m = build_method(name, bits, cfg.seed)
                if m is None:
                    continue
                recs = self.generate(m, cfg.small, cfg.tokens, f"{bits}b")
                self.put(f"payload/{name}/{bits}", self.evaluate(m, recs, cfg.tokens, humans=False))

    def section_tokens(self) -> None:
        """The main comparison again at `long_tokens` new tokens (fresh generations, not prefixes)."""
        cfg = self.cfg
        for name in LONG_METHODS:
            if name not in cfg.methods:
                continue
            if self.over_budget():
                self.results["skipped"].append(f"tokens:{name}:{cfg.long_tokens}")
                continue
            m = build_method(name, 24, cfg.seed)
            recs = self.generate(m, cfg.small, cfg.long_tokens, f"{cfg.long_tokens}t")
            self.put(f"tokens/{name}/{cfg.long_tokens}", self.evaluate(m, recs, cfg.long_tokens))

    def section_timing(self) -> None:
        """Generation and decode time per token, methods interleaved round-robin so that load changes on a
        shared machine hit all of them alike: `rounds` x (batch 16, 16 new tokens) per method, uncached."""
        cfg = self.cfg
        names = self._main_order()
        methods = {n: build_method(n, 24, cfg.seed) for n in names}
        gen: dict[str, list[float]] = {n: [] for n in names}
        rounds, batch, steps = 2, 16, 16
        bar = tqdm(total=rounds * len(names) * batch * steps, desc="timing", unit="tok", file=self.log, leave=False)
        for rd in range(rounds):
            for n in names:
                idx = list(range(rd * batch, (rd + 1) * batch))
                idx = [i % len(self.prompts) for i in idx]
                t = time.perf_counter()
                pays = [payload_bits(cfg.seed, 24, i) for i in idx]
                prompts = [self.prompts[i] for i in idx]
                generate_rows(self.model, self.tok, methods[n], prompts, pays, steps, rd, T1, bar)
                gen[n].append(1000 * (time.perf_counter() - t) / (batch * steps))
        bar.close()
        hids = self.human_ids(cfg.tokens)
        n_tok = sum(len(x) for x in hids)
        out = {}
        for n in names:
            m = methods[n]
            dec_us = None
            if m.level_of_bit:
                t = time.perf_counter()
                m.decode(hids)
                dec_us = 1e6 * (time.perf_counter() - t) / n_tok
            g = sorted(gen[n])
            out[n] = {
                "gen_ms_per_token": g[len(g) // 2],
                "gen_all": gen[n],
                "decode_us_per_token": dec_us,
                "decode_tokens": n_tok,
                "batch": batch,
                "steps": steps,
                "rounds": rounds,
            }
        self.results["cells"]["timing"] = out
        self.save()

    def section_chat(self) -> None:
        from hero_eval.chat import ChatSection

        ChatSection(self).run()

    def section_attribution(self) -> None:
        from hero_eval.attribution_section import AttributionSection

        AttributionSection(self).run()

    def section_gemma(self) -> None:
        from verifier.lm import load_model

        cfg = self.cfg
        gm, gt = load_model("gemma3-270m")
        out = self.results["cells"].setdefault("gemma_ppl", {})
        for name in self._main_order():  # generations come from the cache the main section filled
            if self.over_budget():
                self.results["skipped"].append(f"gemma:{name}")
                continue
            m = build_method(name, 24, cfg.seed)
            recs = self.generate(m, cfg.prompts, cfg.tokens, "gemma")[: cfg.gemma_texts]
            path = self.cache / f"{slug(f'gemma_{m.name}_{m.total_bits}b_{cfg.tokens}t')}.jsonl"
            have = {}
            if path.exists():
                have = {json.loads(x)["i"]: json.loads(x)["ppl"] for x in path.read_text().splitlines() if x.strip()}
            todo = [r for r in recs if r["i"] not in have]
            bar = tqdm(total=len(todo), desc=f"gemma PPL {name}", file=self.log, leave=False, unit="text")
            for s in range(0, len(todo), 4):  # right-padded batches of 4: causal, so padding never leaks
                chunk = todo[s : s + 4]
                vals = score_ppl(gm, gt, [r["prompt"] for r in chunk], [r["text"] for r in chunk], batch_size=4)
                with path.open("a") as fh:
                    for r, v in zip(chunk, vals, strict=True):
                        have[r["i"]] = v
                        fh.write(json.dumps({"i": r["i"], "ppl": v}) + "\n")
                bar.update(len(chunk))
            bar.close()
            vals = [have[r["i"]] for r in recs]
            out[name] = {"values": vals, **metrics.median_ci(vals)}
            self.save()


def quick_summary(results: dict) -> dict:
    """The JSON printed by `hero eval --quick`: per method bit_acc (public / private for HeRo^2) and ppl."""
    out: dict = {}
    for key, cell in results["cells"].items():
        if not key.startswith("main/"):
            continue
        s: dict = {"ppl": cell["ppl"]["median"], "n": cell["n"], "tokens": cell["tokens"], "bits": cell["bits"]}
        if "bit_acc" in cell:
            s["bit_acc"] = cell["bit_acc"]["mean"]
            s["bit_acc_ci95"] = [cell["bit_acc"]["lo"], cell["bit_acc"]["hi"]]
        if "private_bit_acc" in cell:
            s["public_bit_acc"] = cell["public_bit_acc"]["mean"]
            s["private_bit_acc"] = cell["private_bit_acc"]["mean"]
        if "gen_ms_per_token" in cell:
            s["gen_ms_per_token"] = cell["gen_ms_per_token"]
        out[cell["method"]] = s
    return out
