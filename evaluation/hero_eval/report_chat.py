"""The chat section's report: Markdown tables (tables.md) and plots beside results.json.

Every rate is k/n with its Wilson 95% interval; beside each figure stand its texts' median generator perplexity
and mean per-token entropy (nats, of the distribution a plain sampler draws from), because a watermark's
evidence per token is bounded by that entropy and chat answers are lower in it than news continuations.
"""

from __future__ import annotations

import math
from pathlib import Path

from hero_eval.attribution import SYNTHID
from hero_eval.methods import UNWATERMARKED, ModelAwareMethod

AWARE = ModelAwareMethod.SUFFIX
CORPUS_TITLE = {"chat": "instruction prompts (chat answers)", "bbc": "BBC continuations"}


def write_chat_report(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text("\n".join(render(results)) + "\n")
    try:
        plots(results, out)
    except Exception as exc:  # a plot never costs the tables
        (out / "plots-error.txt").write_text(repr(exc))


def _rate(p: dict | None) -> str:
    if not p or not p.get("n"):
        return "-"
    return f"{p['k']}/{p['n']} = {p['k'] / p['n']:.3f} [{p['lo']:.2f}, {p['hi']:.2f}]"


def _tpr(t: dict | None) -> str:
    if not t or not t.get("n_pos"):
        return "-"
    k = round(t["tpr"] * t["n_pos"])
    note = "" if t.get("resolved", True) else " (humans too few to resolve 1e-3)"
    return f"{k}/{t['n_pos']} = {t['tpr']:.3f} [{t['lo']:.2f}, {t['hi']:.2f}]{note}"


def _texts(cell: dict | None) -> str:
    if not cell:
        return ""
    ppl = (cell.get("ppl") or {}).get("median", float("nan"))
    ent = (cell.get("entropy") or {}).get("mean", float("nan"))
    return f"PPL {ppl:.2f}, H {ent:.2f}"


def _get(d: dict | None, *path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def render(results: dict) -> list[str]:
    chat = results.get("cells", {}).get("chat") or {}
    cmds = results.get("commands") or [results.get("config", {}).get("command", "")]
    L = ["# Chat evaluation tables (`hero eval --sections chat`)\n",
         "Generated from results.json by evaluation/hero_eval/report_chat.py. Each figure: k/n = rate [Wilson 95%]; "
         "beside it (PPL, H) = the texts' median generator perplexity and mean per-token entropy in nats.\n",
         "Commands: " + "; ".join(f"`{c}`" for c in cmds if c) + "\n"]
    for corpus, node in chat.items():
        for setting, extra in (node.get("extra") or {}).items():
            L += _setting(corpus, setting, node, extra)
    return L


def _setting(corpus: str, setting: str, node: dict, extra: dict) -> list[str]:
    att = _get(node, "attribution", setting) or {}
    heros = [n for n in extra if n.startswith("HeRo-") and not n.endswith(AWARE)]
    cols = heros + ([SYNTHID] if SYNTHID in extra else [])
    L = [f"## {CORPUS_TITLE.get(corpus, corpus)}: {extra.get('describe', setting)}\n",
         "| figure | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]

    def row(label: str, fn) -> None:
        vals = []
        for c in cols:
            v, cell = fn(c)
            vals.append(f"{v} ({_texts(cell)})" if v not in (None, "-") else "-")
        L.append(f"| {label} | " + " | ".join(vals) + " |")

    def det(c: str, t: str, key: str = "p_le_alpha", role: str = "moderator"):
        e = extra.get(c) or {}
        d = _get(e, "detect", t) if c == SYNTHID else _get(e, role, t)
        return (_rate(_get(d, key)) if key == "p_le_alpha" else _tpr(_get(d, key))), e

    for t in ("50", "100", "200"):
        row(f"detected at p <= 1e-3, {t} tokens, moderator (model-free; SynthID: binomial test)",
            lambda c, t=t: det(c, t))
    row("detection TPR at FPR 1e-3 (threshold on human texts), 50 tokens, moderator",
        lambda c: det(c, "50", "tpr_at_fpr"))
    row("detected at p <= 1e-3, 50 tokens, auditor model-free",
        lambda c: (None, None) if c == SYNTHID else det(c, "50", role="auditor"))
    row("detected at p <= 1e-3, 50 tokens, auditor model-aware",
        lambda c: (None, None) if c == SYNTHID else (
            _rate(_get(extra.get(c + AWARE), "auditor", "50", "p_le_alpha")), extra.get(c + AWARE)))
    for t in ("50", "100", "200"):
        row(f"public `model` exact, moderator, {t} tokens",
            lambda c, t=t: (None, None) if c == SYNTHID else (_rate(_get(att, c, "prefix", t, "model_exact")),
                                                                extra.get(c)))
    for t in ("100", "200"):
        row(f"exact `user`, model-free, {t} tokens",
            lambda c, t=t: (None, None) if c == SYNTHID else (_rate(_get(att, c, "prefix", t, "exact")), extra.get(c)))
    for t in ("100", "200"):
        row(f"exact `user`, model-aware, {t} tokens",
            lambda c, t=t: (None, None) if c == SYNTHID else (_rate(_get(att, c + AWARE, "prefix", t, "exact")),
                                                                extra.get(c + AWARE)))
    row("wrong `user` values (all prefixes, model-free and model-aware)", lambda c: _wrong(att, c, extra))
    row("third party named on 50/50 splices", lambda c: (None, None) if c == SYNTHID else (
        _rate(_get(att, c, "splices", "0.5", "third")), extra.get(c)))
    row("third party named on 80/20 splices", lambda c: (None, None) if c == SYNTHID else (
        _rate(_get(att, c, "splices", "0.8", "third")), extra.get(c)))
    row("human texts: a `user` named (200 tokens)", lambda c: (None, None) if c == SYNTHID else (
        _rate(_get(att, c, "fa_human")), None))
    row("human texts at p <= 1e-3, 50 tokens (moderator; SynthID: binomial)",
        lambda c: (_rate(_get(extra.get(c), "detect" if c == SYNTHID else "moderator", "50", "human_p_le_alpha")),
                   None))
    row("human texts' whole-text p-values, KS against uniform (200 tokens)", lambda c: _ks(att, extra, c))
    row("SynthID wrong keys: p <= 0.01 / p <= 1e-3 (texts x 9 key sets)", lambda c: _wrong_keys(extra, c))
    row("perplexity vs plain sampling, paired (geometric-mean ratio [95%])", lambda c: _paired(extra.get(c)))
    row("distinct outputs of 20 identical requests (50 tokens; per prompt)", lambda c: _div(node, setting, c))
    row("generation CPU time per token vs plain (batch 8)", lambda c: _cost(node, setting, c))
    row("natural length: tokens p10 / p50 / p90; ended with EOS", lambda c: _nat_len(extra.get(c)))
    row("natural length: detected at p <= 1e-3 (moderator; SynthID: binomial)",
        lambda c: (_rate(_get(extra.get(c), "natural", "detected")), _get(extra.get(c), "natural")))
    plain = extra.get(UNWATERMARKED)
    if plain:
        nat = plain.get("natural") or {}
        q = nat.get("length_quantiles") or {}
        L.append("")
        L.append(f"Plain sampling (no watermark), same prompts: {plain['n']} texts, {_texts(plain)}"
                 + (f"; natural length p10/p50/p90 {q.get('p10', 0):.0f} / {q.get('p50', 0):.0f} / "
                    f"{q.get('p90', 0):.0f} tokens, ended {_rate(nat.get('ended'))}" if q else "") + ".")
        fa = _get(att, next(iter(cols), ""), "fa_unwatermarked")
        if fa:
            L.append(f"Plain texts naming a `user` ({cols[0]}): {_rate(fa)}.")
    L.append("")
    return L


def _wrong(att: dict, c: str, extra: dict):
    if c == SYNTHID:
        return None, None
    k = n = 0
    for name in (c, c + AWARE):
        for r in (_get(att, name, "prefix") or {}).values():
            w = r.get("wrong") or {}
            k += w.get("k", 0)
            n += w.get("n", 0)
    return (f"{k} of {n} results" if n else "-"), extra.get(c)


def _ks(att: dict, extra: dict, c: str):
    if c == SYNTHID:
        k = _get(extra.get(c), "calibration", "humans") or {}
    else:
        k = _get(att, c, "human_p_uniform", "text") or {}
    return (ks_text(k) if k.get("n") else "-"), None


def ks_text(k: dict) -> str:
    """Two-sided KS p, then which side a departure is on (too many small p-values is the side that matters)."""
    out = f"KS p = {k['ks_p']:.2g} (n {k['n']})"
    if "ks_p_small" in k:
        out += (f"; too many small p: KS p = {k['ks_p_small']:.2g}, too few: {k['ks_p_large']:.2g}; "
                f"observed p <= 0.01 / 0.1: {_share(k['p_le_0.01'])} / {k['p_le_0.1']:.3f}")
    return out


def _share(x) -> str:
    return f"{x['p']:.3f}" if isinstance(x, dict) else f"{x:.3f}"


def _wrong_keys(extra: dict, c: str):
    if c != SYNTHID:
        return None, None
    w = _get(extra.get(c), "calibration", "wrong_keys") or {}
    if not w.get("n"):
        return "-", None
    return f"{_rate(w.get('p_le_0.01'))} / {_rate(w.get('p_le_0.001'))}; KS p = {w['ks_p']:.2g}", None


def _paired(cell: dict | None):
    p = (cell or {}).get("ppl_vs_plain") or {}
    if not p.get("n"):
        return "-", cell
    return f"{p['ratio']:.3f} [{p['ratio_lo']:.3f}, {p['ratio_hi']:.3f}] (n {p['n']})", cell


def _div(node: dict, setting: str, c: str):
    if c == SYNTHID:
        d = _get(node, "attribution", "diversity_synthid", setting) or {}
        vals = d.get("repeat_distinct_outputs")
    else:
        vals = (_get(node, "attribution", "diversity", setting, c, "repeat_distinct_outputs") or {}).get("values")
    if not vals:
        return "-", None
    return f"{', '.join(str(int(v)) for v in vals)} of 20", None


def _cost(node: dict, setting: str, c: str):
    g = _get(node, "generation_cost", setting) or {}
    r = (g.get("vs_plain") or {})
    if c not in r:
        return "-", None
    ms = g["cpu_ms_per_token"][c]
    out = f"{r[c]:.2f}x ({ms:.1f} ms)"
    stock = f"{SYNTHID} (stock processor)"
    if c == SYNTHID and stock in r:
        out += f"; stock processor {r[stock]:.2f}x"
    return out, None


def _nat_len(cell: dict | None):
    nat = (cell or {}).get("natural") or {}
    q = nat.get("length_quantiles")
    if not q:
        return "-", None
    return f"{q['p10']:.0f} / {q['p50']:.0f} / {q['p90']:.0f}; ended {_rate(nat.get('ended'))}", nat


def plots(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chat = results.get("cells", {}).get("chat") or {}
    for corpus, node in chat.items():
        for setting, extra in (node.get("extra") or {}).items():
            fig, ax = plt.subplots(1, 2, figsize=(11, 4))
            for name, cell in extra.items():
                if not isinstance(cell, dict):
                    continue
                d = cell.get("detect") if name == SYNTHID else cell.get("moderator")
                if d:
                    ts = sorted(d, key=int)
                    ys = [d[t]["p_le_alpha"]["p"] for t in ts]
                    err = [[y - d[t]["p_le_alpha"]["lo"] for y, t in zip(ys, ts, strict=True)],
                           [d[t]["p_le_alpha"]["hi"] - y for y, t in zip(ys, ts, strict=True)]]
                    ax[0].errorbar([int(t) for t in ts], ys, yerr=err, marker="o", capsize=3, label=name)
                nat = cell.get("natural") or {}
                if nat.get("lengths"):
                    ax[1].hist(nat["lengths"], bins=20, alpha=0.45, label=name)
            ax[0].set_xlabel("tokens")
            ax[0].set_ylabel("detected at p <= 1e-3 (moderator / SynthID)")
            ax[0].set_ylim(0, 1.02)
            ax[0].legend(fontsize=8)
            ax[0].set_title(f"{corpus}, {setting}: detection vs length")
            ax[1].set_xlabel("natural answer length (tokens, capped)")
            ax[1].set_title("natural-length answers")
            ax[1].legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out / f"chat_{corpus}_{setting}.png".replace(" ", "_"), dpi=110)
            plt.close(fig)


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)
