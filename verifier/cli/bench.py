"""`hero bench decode|generate|serve`: the command's arguments (see docs/performance.md).

Only the wiring lives here: what each subcommand measures is verifier/cli/bench_figures.py (the figures the
scripts under benchmarks/ print too), `hero bench serve` is verifier/cli/bench_serve.py, and the statistics are
verifier/base/timing.py. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import sys

from verifier.cli.bench_figures import RANDOM_MODEL
from verifier.cli.common import emit

MIN_REPS = 3  # fewer repetitions: a median of one or two runs on a loaded machine is noise


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure decode / generation throughput (prints one JSON line)")
    bsub = p.add_subparsers(dest="bench_command", required=True)
    d = bsub.add_parser("decode", help="evidence kernel throughput: fast path vs pure torch path")
    d.add_argument("--batch", type=int, default=64, help="texts scored together (1-4096)")
    d.add_argument("--tokens", type=int, default=200, help="tokens per text")
    d.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the kernels run")
    d.add_argument("--reps", type=int, default=20, help="timed repetitions of the fast path (the median is reported)")
    d.add_argument("--torch-reps", type=int, default=3, help="repetitions of the (slow) torch path; 0 = skip")
    d.add_argument("--profile", default=None,
                   help="profile name or YAML path (default: the deployment's profile rule: HERO_PROFILE, else the "
                        "profile of this deployment's keys, else the new-deployment profile)")
    d.add_argument("--levels", type=int, default=0,
                   help="levels decoded: 1 = moderator (public level), 0 = all levels (auditor)")
    d.set_defaults(handler=cmd_decode)
    g = bsub.add_parser("generate", help="watermark overhead in model.generate over plain sampling")
    g.add_argument("--batch", type=int, default=1, help="rows generated together (1-4096)")
    g.add_argument("--tokens", type=int, default=32, help="new tokens per row")
    g.add_argument("--reps", type=int, default=3, help="rounds; each runs every variant once, the order rotating")
    g.add_argument("--model", default=None,
                   help=f"a built-in model, a local directory, a hub id, or {RANDOM_MODEL} (random weights); "
                        "default: the first profile's tokenizer (its model)")
    g.add_argument("--profile", nargs="+", default=None, metavar="PROFILE",
                   help="profile(s) to watermark with (name or YAML path), each a variant in the same rounds; "
                        "the first is `hero`, the others `hero-NAME`; all must share the model's vocabulary "
                        "(default: the deployment's profile rule, as `hero generate`)")
    g.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the model runs")
    g.add_argument("--path", choices=["fused", "engine"], default="fused",
                   help="fused: HeroWatermarkingConfig (transformers' warpers on); engine: HeroLogitsProcessor")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1.0 = off")
    g.add_argument("--synthid", action="store_true", help="also time transformers' SynthID in the same pairs")
    g.add_argument("--exact-step", action="store_true",
                   help="also time HeRo with the C step's exact path only (no fast path) in the same pairs")
    g.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="the model's weights")
    g.set_defaults(handler=cmd_generate)
    from verifier.cli import bench_serve  # its own module: `hero bench serve`

    bench_serve.register(bsub)


def warn_few_reps(reps: int, flag: str = "--reps") -> str | None:
    """A warning (printed to stderr, and returned for the JSON line) when a figure rests on < MIN_REPS runs."""
    if reps >= MIN_REPS:
        return None
    msg = f"only {reps} repetition(s) ({flag} {reps}): the figures are not reliable; use {flag} {MIN_REPS} or more"
    print(f"hero: warning: {msg}", file=sys.stderr)
    return msg


def _check(args: argparse.Namespace) -> None:
    import torch

    if not 1 <= args.batch <= 4096 or not 1 <= args.tokens <= 100_000:
        raise ValueError("--batch must be in 1..4096 and --tokens in 1..100000")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device available")


def rule_profile(args: argparse.Namespace) -> str:
    """The profile a bench runs when none is named: the deployment's rule (verifier.keys.deployment), as every
    other command: HERO_PROFILE, else the profile of this deployment's keys, else NEW_DEPLOYMENT_PROFILE. The bench
    draws keys of its own; the store is only asked which profile it holds."""
    from verifier.cli.common import cli_settings, open_database
    from verifier.keys.deployment import deployment_profile

    settings = cli_settings(args)
    if settings.profile:
        return settings.profile
    return deployment_profile(None, open_database(settings))


def cmd_decode(args: argparse.Namespace) -> None:
    from verifier.cli.bench_figures import decode_figures
    from verifier.cli.common import resolve_profile

    _check(args)
    profile = resolve_profile(args.profile or rule_profile(args))
    if not 0 <= args.levels <= profile.depth:
        raise ValueError(f"--levels must be in 0..{profile.depth}")
    warnings = [w for w in (warn_few_reps(max(1, args.reps)),
                            warn_few_reps(args.torch_reps, "--torch-reps") if args.torch_reps > 0 else None) if w]
    out = decode_figures(args.batch, args.tokens, args.device, max(1, args.reps), max(0, args.torch_reps),
                         profile, args.levels)
    emit({**out, "warnings": warnings} if warnings else out)


def cmd_generate(args: argparse.Namespace) -> None:
    from verifier.cli.bench_figures import generate_figures, generate_overhead_figures
    from verifier.engine.profile import resolve_profile

    _check(args)
    if not 0 <= args.threads <= 1024:
        raise ValueError("--threads must be in 0..1024")
    names = args.profile or [rule_profile(args)]
    profiles = [resolve_profile(p) for p in names]  # a bad name fails here, before the model loads
    warning = warn_few_reps(max(1, args.reps))
    if args.path == "engine":
        if len(profiles) > 1:
            raise ValueError("--path engine takes one --profile")
        out = generate_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device,
                               profile=profiles[0])
    else:
        out = generate_overhead_figures(args.batch, args.tokens, max(1, args.reps), args.model, args.device,
                                        top_k=args.top_k, top_p=args.top_p, synthid=args.synthid, dtype=args.dtype,
                                        exact_step=args.exact_step, profiles=profiles, threads=args.threads)
    emit({**out, "warnings": [warning]} if warning else out)
