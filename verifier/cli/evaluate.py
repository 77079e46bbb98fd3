"""`hero eval`: the reproducible evaluation (Markdown + PNG report in docs/evaluation/, JSON summary on stdout).

The harness is its own distribution (hero-eval, package `hero_eval`, in evaluation/), not part of the base
install: without it the command is still listed, and answers any command line with what to install."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

HELP = "evaluate HeRo against MPAC/BiMark (bit accuracy, TPR, PPL, robustness)"
MISSING = ("hero: error: `hero eval` needs the evaluation harness, the hero-eval distribution (no module "
           "'hero_eval'): from a checkout of this project, pip install -e ./evaluation")


def register(sub: argparse._SubParsersAction) -> None:
    try:
        from hero_eval import SECTIONS
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "hero_eval":
            raise
        _register_without_harness(sub)
        return

    p = sub.add_parser("eval", help=HELP)
    p.add_argument("--quick", action="store_true", help="CI mode: 3 methods, 32 prompts x 64 tokens, no gemma")
    p.add_argument("--out", default=None, help="report folder (default docs/evaluation; quick: none unless given)")
    p.add_argument("--prompts", type=int, default=None, help="prompts for the main 24-bit cell")
    p.add_argument("--small", type=int, default=None, help="prompts for the other cells")
    p.add_argument("--humans", type=int, default=None, help="human texts for TPR thresholds")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per generation (main cell)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts, payloads and keys")
    p.add_argument("--batch-size", type=int, default=None, help="prompts generated together (default: the runner's)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=None, help="run these sections only")
    p.add_argument("--methods", nargs="+", default=None, help="methods compared (default: every one)")
    p.add_argument("--budget-minutes", type=float, default=0.0, help="skip sections that would start after this")
    p.add_argument("--k1", nargs="+", type=int, default=None, help="K_1 values of the hierarchy sweep")
    p.add_argument("--long-tokens", type=int, default=None, help="new tokens of the long cells (section tokens)")
    p.add_argument("--gemma-texts", type=int, default=None, help="texts per method scored by Gemma-3-270m")
    p.add_argument("--settings", nargs="+", default=None, help="sampling settings of the attribution section")
    p.add_argument("--attr-methods", nargs="+", default=None, help="methods of the attribution section")
    p.add_argument(
        "--attr-cap", nargs="+", default=None, metavar="METHOD=N",
        help="attribution: at most N main texts for METHOD (METHOD@SETTING: in one setting; METHOD@humans: "
        "N human texts)",
    )
    p.add_argument("--generate-only", action="store_true", help="attribution: only fill the generation cache")
    p.add_argument("--attr-plan", nargs="+", default=None, metavar="FIELD=N",
                   help="attribution: sizes of the small experiments (DataPlan fields, e.g. col_users=0 skips the "
                   "collusion texts and measurement)")
    p.add_argument("--measure-only", action="store_true",
                   help="attribution: measure the cached texts only (caps must match what is cached); for a run "
                   "beside a --generate-only one")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared machine)")
    p.add_argument("--profile", nargs="+", default=None, dest="profiles", metavar="NAME",
                   help="chat: HeRo profiles compared (policies/profiles/NAME.yaml; default v3)")
    p.add_argument("--chat-settings", nargs="+", default=None, metavar="SETTING",
                   help="chat: sampling settings (k50p0.9 = top-k 50 / top-p 0.9, T0.7, T1; default k50p0.9)")
    p.add_argument("--chat-corpora", nargs="+", default=None, choices=("chat", "bbc"),
                   help="chat: prompt sets (chat = instruction prompts, the main setting; bbc = news continuations)")
    p.add_argument("--natural-prompts", type=int, default=None,
                   help="chat: answers at their natural length per method and setting (0: none; default 100)")
    p.add_argument("--natural-tokens", type=int, default=None, help="chat: cap of a natural-length answer (400)")
    p.add_argument("--cost-rounds", type=int, default=None, dest="chat_cost_rounds",
                   help="chat: interleaved rounds of the generation-cost measurement (0: none; default 3)")
    p.add_argument("--aware-humans", type=int, default=None, dest="chat_aware_humans",
                   help="chat: human texts decoded model-aware (an LM pass each; default 200)")
    p.set_defaults(handler=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> None:
    import torch

    from hero_eval.methods import ALL_METHODS
    from hero_eval.runner import Config, Runner, quick_summary
    from verifier.lm import load_model

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    command = "hero " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["eval"] else "hero eval"
    kw = dict(
        seed=args.seed,
        prompts=args.prompts,
        small=args.small,
        humans=args.humans,
        tokens=args.tokens,
        batch_size=args.batch_size,
        budget_minutes=args.budget_minutes,
        command=command,
        threads=args.threads,
        sections=tuple(args.sections) if args.sections else None,
        methods=tuple(args.methods) if args.methods else None,
        hierarchy_k1=tuple(args.k1) if args.k1 else None,
        long_tokens=args.long_tokens,
        gemma_texts=args.gemma_texts,
        settings=tuple(args.settings) if args.settings else None,
        attr_methods=tuple(args.attr_methods) if args.attr_methods else None,
        generate_only=args.generate_only or None,
        measure_only=args.measure_only or None,
        attr_plan=_counts(args.attr_plan, "--attr-plan", "FIELD"),
        attr_caps=_counts(args.attr_cap, "--attr-cap", "METHOD"),
        profiles=tuple(args.profiles) if args.profiles else None,
        chat_settings=tuple(args.chat_settings) if args.chat_settings else None,
        chat_corpora=tuple(args.chat_corpora) if args.chat_corpora else None,
        natural_prompts=args.natural_prompts,
        natural_tokens=args.natural_tokens,
        chat_aware_humans=args.chat_aware_humans,
        chat_cost_rounds=args.chat_cost_rounds,
    )
    for m in kw["methods"] or ():
        if m not in ALL_METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {list(ALL_METHODS)}")
    from hero_eval.attribution import ATTR_METHODS
    from hero_eval.sampling import SETTINGS
    from verifier.engine.profile import profile_path

    for name in kw["profiles"] or ():
        if not profile_path(name).exists():  # $HERO_PROFILES_DIR/NAME.yaml, policies/profiles/NAME.yaml, a path
            raise ValueError(f"unknown profile {name!r}: no such file under $HERO_PROFILES_DIR or policies/profiles")
    for m in kw["attr_methods"] or ():
        if m not in ATTR_METHODS:
            raise ValueError(f"unknown attribution method {m!r}; choose from {list(ATTR_METHODS)}")
    for s in (kw["settings"] or ()) + (kw["chat_settings"] or ()):
        if s not in SETTINGS:
            raise ValueError(f"unknown sampling setting {s!r}; choose from {list(SETTINGS)}")
    if args.quick:
        cfg = Config.quick_config(**kw, out=args.out or "")
    else:
        chat_only = kw["sections"] == ("chat",)
        default_out = "docs/evaluation/chat" if chat_only else "docs/evaluation"
        cfg = Config(**{k: v for k, v in kw.items() if v is not None}, out=args.out or default_out)
    model, tokenizer = load_model("smollm2")
    runner = Runner(cfg, model, tokenizer)
    if args.quick and not cfg.out:
        runner.save = lambda: None  # type: ignore[method-assign]
        print("hero: --quick writes no report files; add --out DIR to write one", file=sys.stderr)
    results = runner.run()
    if cfg.out and cfg.sections != ("chat",):  # the chat section writes its own report (report_chat.py)
        from pathlib import Path

        from hero_eval.report import write_report

        write_report(results, Path(cfg.out))
        print(f"hero: report written to {Path(cfg.out) / 'README.md'} (results.json beside it)", file=sys.stderr)
    print(json.dumps(quick_summary(results), indent=1))


def _register_without_harness(sub: argparse._SubParsersAction) -> None:
    """`hero eval` without hero_eval: no option is known here (no prefix character can start a word of argv, so
    `--quick` and `--help` are plain words), and every command line reaches the handler's one line, exit 2."""
    p = sub.add_parser("eval", help=HELP, add_help=False, prefix_chars="\0")
    p.add_argument("words", nargs="*")
    p.set_defaults(handler=_without_harness)


def _without_harness(args: argparse.Namespace) -> int:
    print(MISSING, file=sys.stderr)
    return 2


def _counts(items: list[str] | None, flag: str, what: str) -> dict[str, int] | None:
    """`NAME=N` arguments -> {NAME: N} (the name may hold '=' or '@': split at the last '=')."""
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, n = item.rpartition("=")
        if not sep or not n.isdigit():
            raise ValueError(f"{flag} expects {what}=N, got {item!r}")
        out[name] = int(n)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m verifier.cli.evaluate eval ...`: the same command without the `hero` entry point."""
    parser = argparse.ArgumentParser(prog="hero")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
