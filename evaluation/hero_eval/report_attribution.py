"""Report part of the attribution section (issue 11): tables and plots from results["cells"]["attribution"]."""

from __future__ import annotations

from pathlib import Path

GOALS = {
    "25": ">= 0.80",
    "50": ">= 0.97",
    "100": ">= 0.995",
    "200": ">= 0.999",
    "REP 10%": ">= 0.97",
    "REP 20%": ">= 0.90",
}


SUMMARY_METHODS = (
    "HeRo-v3",
    "HeRo-v3 (model-aware)",
    "HeRo-v2",
    "HeRo-v1",
    "HeRo-v1 (engine before v2)",
)  # the goals table is about the product; baselines are in the tables below


def _p(d: dict | None, digits: int = 3) -> str:
    """k/n rate [Wilson 95%]."""
    if not d or not d.get("n"):
        return "—"
    return f"{d['p']:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}]"


def _kn(d: dict | None) -> str:
    if not d or not d.get("n"):
        return "—"
    return f"{d['k']}/{d['n']} = {d['p']:.4f} [{d['lo']:.4f}, {d['hi']:.4f}]"


def _methods(cell: dict) -> list[tuple[str, dict]]:
    return [(n, c) for n, c in cell.items() if isinstance(c, dict) and "prefix" in c]


def _settings(att: dict) -> list[tuple[str, dict]]:
    return [(s, att[s]) for s in att.get("plan", {}).get("settings", []) if s in att]


def section(results: dict) -> list[str]:
    att = results.get("cells", {}).get("attribution")
    if not att or not _settings(att):
        return []
    L = _intro(att)
    L += _summary(att)
    for name, cell in _settings(att):
        L += _setting(name, cell)
    L += _reliability(att)
    L += _diversity(att)
    L += _collusion(att)
    L += _decode_cost(att)
    return L


def _intro(att: dict) -> list[str]:
    plan = att["plan"]
    texts = plan.get("texts", {})
    n = str(max(texts.values(), default=plan["prompts"]))
    fewer = {k.split("@")[0]: v for k, v in texts.items() if v < 200}
    short = (f" ({', '.join(f'{m}: {v}' for m, v in sorted(fewer.items()))}: **fewer than the 200 the issue asks "
             "for**, see the notes)") if fewer else ""
    return [
        "## Attribution you can stand behind (issue 11, spec v2)\n",
        f"SmolLM2-135M, BBC prompts, {n} texts{short} of {plan['tokens']} new tokens per method and sampling "
        "setting (min_new_tokens = max_new_tokens); one provider `model` value for all texts and a random "
        "12-bit `user` per text (the same users for every method: HeRo's level-2 field, bits 12..23 of the "
        "24-bit MPAC/BiMark payload). HeRo-v2 = the spec-v2 default profile; HeRo-v1 = the v1 default "
        "profile (HeRo²(2,2), K_1 = 80, six 2-bit segments per level) decoded by the current engine; "
        "HeRo-v1 (engine before v2) = the same texts decoded by the engine as shipped before spec v2. "
        "Every text is decoded as a verifier receives it (token ids → text → ids). Rates are k/n with "
        "Wilson 95% intervals; the human-text false attribution is over 2000 BBC articles.\n",
        "What is *released*: HeRo (current engine) releases a level's fields only when that level is "
        "`decoded` and names candidates when it is `mixed`; the engine before v2 released the fields of every "
        "level with a scored token; MPAC and BiMark have no per-text p-value, so they release their decoded "
        "value only when the detection score exceeds the threshold at FPR 1e-3 on human text cut to the same "
        "length (for the human texts themselves: two-fold, each half gated by the threshold of the other "
        "half). *Exact* = the released value equals the text's user (nothing released counts as a miss). "
        "*False attribution* = a value named that the text does not carry.\n",
    ]


def _goal_rows(att: dict, method: str) -> list[tuple[str, str, list[str]]]:
    rows = []
    cells = [c.get(method) for _, c in _settings(att)]
    for t in ("25", "50", "100", "200"):
        rows.append(
            (
                f"exact `user` at {t} tokens",
                GOALS[t],
                [_p((c or {}).get("prefix", {}).get(t, {}).get("exact")) for c in cells],
            )
        )
    for q, g in (("0.1", "REP 10%"), ("0.2", "REP 20%")):
        rows.append(
            (
                f"exact `user`, 200 tokens, {g[4:]} tokens replaced",
                GOALS[g],
                [_p((c or {}).get("replace", {}).get(q, {}).get("exact")) for c in cells],
            )
        )
    rows.append(("false attribution, human texts", "<= 1e-3", [_kn((c or {}).get("fa_human")) for c in cells]))
    rows.append(
        (
            "false attribution, unwatermarked model text",
            "<= 1e-3",
            [_kn((c or {}).get("fa_unwatermarked")) for c in cells],
        )
    )
    rows.append(
        (
            "third-party values on two-user splices (50/50 + 80/20)",
            "0",
            [_kn((c or {}).get("fa_splices")) for c in cells],
        )
    )
    rows.append(
        (
            "splices 50/50 at 200 tokens: both users named (`mixed`)",
            ">= 0.9",
            [_p((c or {}).get("splices", {}).get("0.5", {}).get("both")) for c in cells],
        )
    )
    rows.append(("detection TPR at FPR 1e-3, 50 tokens", ">= 0.99", [_tpr((c or {}).get("tpr50")) for c in cells]))
    return rows


def _tpr(t: dict | None) -> str:
    if not t:
        return "—"
    return f"{t['tpr']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}]"


def _summary(att: dict) -> list[str]:
    sets = _settings(att)
    present = {m for _, c in sets for m, _ in _methods(c)}
    methods = [m for m in SUMMARY_METHODS if m in present]
    L = []
    for m in methods:
        L.append(f"### {m}: the issue's goals, measured\n")
        L.append("| figure | goal (v2 default) | " + " | ".join(c.get("describe", s) for s, c in sets) + " |")
        L.append("|---|---|" + "---|" * len(sets))
        for fig, goal, vals in _goal_rows(att, m):
            L.append(f"| {fig} | {goal} | " + " | ".join(vals) + " |")
        L.append("")
    return L


def _setting(name: str, cell: dict) -> list[str]:
    ms = _methods(cell)
    if not ms:
        return []
    L = [f"### Sampling {cell.get('describe', name)}: all methods\n"]
    ts = sorted({int(t) for _, c in ms for t in c["prefix"]})
    L.append("Exact `user` released (prefixes of the same texts; REP = random token replacement at 200 tokens):\n")
    L.append("| method | n | " + " | ".join(f"{t} tokens" for t in ts) + " | REP 10% | REP 20% |")
    L.append("|---|---|" + "---|" * (len(ts) + 2))
    for m, c in ms:
        vals = [_p(c["prefix"].get(str(t), {}).get("exact")) for t in ts]
        vals += [_p(c["replace"].get(q, {}).get("exact")) for q in ("0.1", "0.2")]
        L.append(f"| {m} | {c['n']} | " + " | ".join(vals) + " |")
    L.append("\nWrong value named on the method's own watermarked texts (a false attribution of a real user's text):\n")
    L.append("| method | " + " | ".join(f"{t} tokens" for t in ts) + " | REP 10% | REP 20% |")
    L.append("|---|" + "---|" * (len(ts) + 2))
    for m, c in ms:
        vals = [_kn(c["prefix"].get(str(t), {}).get("wrong")) for t in ts]
        vals += [_kn(c["replace"].get(q, {}).get("wrong")) for q in ("0.1", "0.2")]
        L.append(f"| {m} | " + " | ".join(vals) + " |")
    L.append("\nThe decoder's best value, released or not (for HeRo v1 and the baselines: the argmax value):\n")
    L.append("| method | " + " | ".join(f"{t} tokens" for t in ts) + " |")
    L.append("|---|" + "---|" * len(ts))
    for m, c in ms:
        L.append(f"| {m} | " + " | ".join(_p(c["prefix"].get(str(t), {}).get("best")) for t in ts) + " |")
    L.append("\nFalse attribution (any value named on text that carries none, or a third value on a splice):\n")
    L.append("| method | human BBC texts | unwatermarked model texts | third-party on splices |")
    L.append("|---|---|---|---|")
    for m, c in ms:
        L.append(f"| {m} | {_kn(c.get('fa_human'))} | {_kn(c.get('fa_unwatermarked'))} | {_kn(c.get('fa_splices'))} |")
    L.append("\nTwo-user splices (A's first share of the tokens, then B's opening; 200 tokens; pairs (i, i+1)):\n")
    L.append(
        "| method | A/B | n (equal-user pairs skipped) | both named (`mixed`) | one of the two | nothing "
        "| third party |"
    )
    L.append("|---|---|---|---|---|---|---|")
    for m, c in ms:
        for q, s in c["splices"].items():
            share = round(float(q) * 100)
            L.append(
                f"| {m} | {share}/{100 - share} | {s['n']} ({s['skipped_equal_users']}) | {_p(s['both'])} | "
                f"{_p(s['one'])} | {_p(s['none'])} | {s['counts']['third']} |"
            )
    L += _ppl_and_detection(cell, ms)
    return L


def _ppl_and_detection(cell: dict, ms: list[tuple[str, dict]]) -> list[str]:
    from hero_eval.formatting import ci_text as _ci
    from hero_eval.formatting import paired_values as _paired_values

    vals = {n: c.get("gen_ppl") or [] for n, c in cell.items() if isinstance(c, dict) and c.get("gen_ppl")}
    paired = _paired_values(vals)
    L = [
        "\nDetection and perplexity (generator PPL of the sampled text under the raw model; paired per prompt "
        "against unwatermarked text of the same setting):\n"
    ]
    L.append("| method | TPR at FPR 1e-3, 50 tokens | PPL median [95% CI] | median log(PPL / PPL_unwm) | Wilcoxon p |")
    L.append("|---|---|---|---|---|")
    for n, c in cell.items():
        if not isinstance(c, dict) or "ppl" not in c:
            continue
        med, pv = paired.get(n, (None, None))
        extra = f"{med:+.3f} | {pv:.3g}" if med is not None else "— | —"
        L.append(f"| {n} | {_tpr(c.get('tpr50'))} | {_ci(c['ppl'], 'median')} | {extra} |")
    L.append("")
    return L


def _reliability(att: dict) -> list[str]:
    L = []
    for s, cell in _settings(att):
        for m, c in _methods(cell):
            rows = c.get("reliability")
            if not rows:
                continue
            worst = max(r["gap"] for r in rows)
            L.append(f"#### Reliability of `confidence`: {m}, {cell.get('describe', s)}\n")
            L.append(
                f"{c['reliability_n']} released values: the prefixes (25-200 tokens) and the 10%/20% replacement "
                f"attacks of this setting's texts. Largest gap {worst:.3f} (goal: every bin within 0.05).\n"
            )
            L.append("| confidence bin | n | mean confidence | fraction exactly right [95% CI] | gap |")
            L.append("|---|---|---|---|---|")
            for r in rows:
                L.append(
                    f"| {r['lo_edge']:.1f}-{r['hi_edge']:.1f} | {r['n']} | {r['mean_confidence']:.3f} | "
                    f"{_p(r)} | {r['gap']:.3f} |"
                )
            L.append("")
    return ["### Reliability diagrams\n", *L] if L else []


def _mc(d: dict | None) -> str:
    return "—" if not d else f"{d['mean']:.1f} [{d['lo']:.1f}, {d['hi']:.1f}]"


def _diversity(att: dict) -> list[str]:
    div = att.get("diversity")
    if not div:
        return []
    plan = att["plan"]
    L = [
        "### Diversity\n",
        f"Repeats: {plan['repeats']} identical requests (same prompt, same user, fresh randomness per request) "
        f"for each of {plan['div_prompts']} prompts, {plan['div_tokens']} new tokens: distinct outputs and "
        f"distinct first-8-token openings (of {plan['repeats']}). Users: {plan['users']} users on one prompt, "
        f"for each of {plan['user_prompts']} prompts: distinct first-{plan['prefix']}-token openings and distinct "
        f"first tokens (of {plan['users']}). Means over prompts with bootstrap 95% intervals over prompts; "
        "`unwatermarked` is plain sampling.\n",
        "| setting | method | repeats: distinct outputs | repeats: distinct 8-token openings | users: distinct "
        "openings | users: distinct first tokens |",
        "|---|---|---|---|---|---|",
    ]
    for s, per in div.items():
        for m, d in per.items():
            L.append(
                f"| {s} | {m} | {_mc(d['repeat_distinct_outputs'])} | {_mc(d['repeat_distinct_first8'])} | "
                f"{_mc(d['users_distinct_prefix'])} | {_mc(d['users_distinct_first_token'])} |"
            )
    L.append("")
    return L


def _collusion(att: dict) -> list[str]:
    col = att.get("collusion")
    if not col:
        return []
    plan = att["plan"]
    half = plan["col_users"] // 2
    L = [
        "### Level-2 linkage and framing by colluding accounts\n",
        f"{plan['col_users']} accounts (distinct users), each answering the same {plan['col_prompts']} prompts "
        f"({plan['col_tokens']} new tokens, setting {col.get('setting')}). The colluding group is accounts "
        f"0-{half - 1}: they hold their own texts and labels, and no level-2 key. **Linkage:** for a pair of "
        "texts, the score is the (smoothed) fraction of shared h-token contexts (h = the method's context width; 4 "
        "for unwatermarked text) after which both "
        "texts chose the same next token; "
        "the group fits the threshold that best separates same-account from different-account pairs *of its own "
        f"texts*, then applies it to pairs of the other {plan['col_users'] - half} accounts' texts. The level-1 "
        "variant counts only contexts where both next tokens lie in the same level-1 chunk (what a level-1 key "
        "holder can compute). AUC 0.5 = cannot tell users apart; unwatermarked text is the control. "
        "Test-AUC intervals: "
        "bootstrap over accounts.\n",
        "| method | variant | train AUC (group) | test AUC [95% CI] (outsiders) | test balanced accuracy (TPR / TNR) "
        "| test pairs same / different | mean shared contexts |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, r in col.items():
        if not isinstance(r, dict):
            continue
        for v in ("keyless", "level1"):
            x = r.get(v)
            if not x:
                continue
            lo, hi = x["test_auc_ci"]
            L.append(
                f"| {m} | {v} | {x['train_auc']:.3f} | {x['test_auc']:.3f} [{lo:.3f}, {hi:.3f}] | "
                f"{x['test_balanced_accuracy']:.3f} ({x['test_tpr']:.2f} / {x['test_tnr']:.2f}) | "
                f"{x['test_pairs']['same']} / {x['test_pairs']['different']} | {x['mean_shared_contexts']:.1f} |"
            )
    fr = [(m, r["framing"]) for m, r in col.items() if isinstance(r, dict) and "framing" in r]
    if fr:
        L.append(
            "\n**Framing:** the group splices two members' answers to the same prompt (50/50 and 80/20, both "
            "orders, every member pair and prompt) and submits them to an auditor. A value no member carries "
            "frames an outsider:\n"
        )
        L.append(
            "| method | splices | names a value outside the group | third party (neither spliced user) "
            "| both named | one | nothing |"
        )
        L.append("|---|---|---|---|---|---|---|")
        for m, f in fr:
            L.append(
                f"| {m} | {f['n']} | {_kn(f['outside_group'])} | {_kn(f['third_party'])} | {_p(f['both'])} | "
                f"{_p(f['one'])} | {_p(f['none'])} |"
            )
    L.append("")
    return L


def _decode_cost(att: dict) -> list[str]:
    dc = att.get("decode_cost")
    if not dc:
        return []
    L = [
        "### Decode cost on CPU\n",
        f"{dc['texts']} human texts ({dc['tokens']} tokens) in one batch, token ids in (tokenisation excluded), "
        f"{dc['rounds']} interleaved rounds (median shown), {dc['torch_threads']} torch thread(s), shared 2-core "
        "machine (indicative: ±30% between identical runs has been seen). "
        "GPU: measured by `scripts/gpu-check` on a lent card (docs/performance.md, section CUDA: v1 and v2, "
        "moderator and auditor). Model-aware rows: the first "
        f"{dc.get('texts_model_aware', dc['texts'])} texts, LM re-run included (no pass re-used).\n",
        "| decoder | µs/token (median) | 200-token texts/s per process | all rounds |",
        "|---|---|---|---|",
    ]
    for k, v in dc["us_per_token"].items():
        L.append(f"| {k} | {v:.1f} | {1e6 / (200 * v):.1f} | " + ", ".join(f"{x:.1f}" for x in dc["all"][k]) + " |")
    old = dc.get("v1_engine")
    if old:
        for k, v in old["us_per_token"].items():
            L.append(
                f"| {k}, engine before v2 (separate run) | {v:.1f} | "
                + ", ".join(f"{x:.1f}" for x in old["all"][k])
                + " |"
            )
    L.append("")
    return L


def plots(results: dict, out: Path, plt) -> list[str]:
    att = results.get("cells", {}).get("attribution")
    if not att or not _settings(att):
        return []
    made = [_plot_exact(att, out, plt)]
    rel = _plot_reliability(att, out, plt)
    return [p for p in (*made, rel) if p]


def _plot_exact(att: dict, out: Path, plt) -> str | None:
    sets = _settings(att)
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4.5), squeeze=False)
    drawn = False
    for ax, (s, cell) in zip(axes[0], sets, strict=True):
        for m, c in _methods(cell):
            ts = sorted(int(t) for t in c["prefix"])
            ys = [c["prefix"][str(t)]["exact"] for t in ts]
            ax.errorbar(
                ts,
                [y["p"] for y in ys],
                yerr=[[max(0.0, y["p"] - y["lo"]) for y in ys], [max(0.0, y["hi"] - y["p"]) for y in ys]],
                marker="o",
                capsize=2,
                label=m,
            )
            drawn = True
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks([25, 50, 100, 200], ["25", "50", "100", "200"])
        ax.set_xlabel("generated tokens (prefix)")
        ax.set_ylabel("exact 12-bit user released")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(cell.get("describe", s))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    if not drawn:
        plt.close(fig)
        return None
    fig.savefig(out / "attribution_exact_vs_tokens.png", dpi=120)
    plt.close(fig)
    return "attribution_exact_vs_tokens.png"


def _plot_reliability(att: dict, out: Path, plt) -> str | None:
    curves = [
        (f"{m}, {s}", c["reliability"]) for s, cell in _settings(att) for m, c in _methods(cell) if c.get("reliability")
    ]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", ls=":", label="perfect calibration")
    for label, rows in curves:
        x = [r["mean_confidence"] for r in rows]
        y = [r["p"] for r in rows]
        err = [[max(0.0, r["p"] - r["lo"]) for r in rows], [max(0.0, r["hi"] - r["p"]) for r in rows]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=2, label=label)
    ax.set_xlabel("confidence (mean in bin)")
    ax.set_ylabel("fraction exactly right (Wilson 95%)")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "attribution_reliability.png", dpi=120)
    plt.close(fig)
    return "attribution_reliability.png"
