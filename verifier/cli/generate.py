"""`hero generate`: watermarked continuations with a local model (verifier.offline.LocalHero).

One prompt (--prompt): JSON {text, payload, key_version, key_versions, tokens}, or the text alone with
--format text. A batch (--input prompts.jsonl, lines {"prompt": ..., "fields": {...}}): one JSON line per
prompt (text, payload, key_versions, tokens), in input order, the model loaded once; progress on stderr."""

from __future__ import annotations

import argparse
import json
import sys

from verifier.cli.common import add_profile_arg, cli_settings, emit, read_lines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate watermarked text with a local model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the text to continue (with --chat: the user's message)")
    src.add_argument("--input", metavar="FILE",
                     help='JSON lines {"prompt": ..., "fields": {"model": 37, ...}} (\'-\' = stdin); one JSON line '
                     "out per prompt: text, payload, key_versions, tokens")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                   help="payload field (repeat); with --input, the default for lines without that field")
    p.add_argument("--format", choices=("json", "text"), default="json",
                   help="json: the text with its payload and key versions; text: the text alone, "
                   "ready to paste or pipe (one prompt only)")
    p.add_argument("--chat", action="store_true",
                   help="send each prompt as a user message under the model's chat template (an instruct model "
                   "then answers it instead of continuing it)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="new tokens at most (1-4096)")
    p.add_argument(
        "--min-new-tokens", type=int, default=0, help="no end-of-text before this many tokens (longer = surer decode)"
    )
    p.add_argument("--model", default=None,
                   help="a built-in name, a local directory or a hub id; default: the profile's tokenizer's model")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample among the K likeliest tokens only (default: off)")
    p.add_argument("--top-p", type=float, default=None,
                   help="sample among the likeliest tokens whose probabilities reach P only (default: off)")
    p.add_argument("--batch-size", type=int, default=8, help="with --input: prompts generated together")
    p.add_argument("--opening-nats", type=float, default=None,
                   help="draw the opening fresh until its tokens' surprisal reaches this many nats (default 8; 0: "
                        "only the first h tokens, spec v2's rule): identical requests then differ as plain "
                        "sampling does")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads of this process (default: 1, or OMP_NUM_THREADS when set; on a busy machine "
                        "more threads than free cores makes generation many times slower)")
    add_profile_arg(p)
    p.set_defaults(handler=cmd_generate)


def set_threads(threads: int | None) -> int:
    """torch's intra-op threads for a generating process: `threads`, else OMP_NUM_THREADS when set, else 1. One
    thread per process is the default because torch's own (one per core) collapses when the cores are shared:
    `hero generate` made 0.4-0.7 tokens/s with it on a busy 2-core machine and 9.2-9.5 with one thread."""
    import os

    import torch

    if threads is None:
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        threads = int(env) if env.isdigit() and int(env) > 0 else 1
    if not 1 <= threads <= 1024:
        raise ValueError("--threads must be in 1..1024")
    torch.set_num_threads(threads)
    return threads


def read_prompts(path: str, defaults: dict[str, int]) -> tuple[list[str], list[dict[str, int]]]:
    """The prompts and payloads of a JSON-lines file; errors name the line."""
    lines = read_lines(path)
    prompts: list[str] = []
    payloads: list[dict[str, int]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path} line {n}: not JSON ({exc.msg})") from None
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
            raise ValueError(f'{path} line {n}: expected {{"prompt": "...", "fields": {{...}}}} with a non-empty '
                             "prompt")
        fields = item.get("fields", {})
        if not isinstance(fields, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in fields.items()):
            raise ValueError(f'{path} line {n}: "fields" must map field names to integers')
        prompts.append(item["prompt"])
        payloads.append({**defaults, **fields})
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts, payloads


def cmd_generate(args: argparse.Namespace) -> None:
    from verifier.engine.payload import encode_payload, parse_field_args
    from verifier.offline import LocalHero, stderr_progress

    if args.prompt is not None and not args.prompt.strip():
        raise ValueError("--prompt is empty")
    if args.input is not None and args.format == "text":
        raise ValueError("--format text prints one text; --input writes JSON lines (one per prompt)")
    if not 1 <= args.max_new_tokens <= 4096:
        raise ValueError("--max-new-tokens must be in 1..4096")
    if not 0 <= args.min_new_tokens <= args.max_new_tokens:
        raise ValueError("--min-new-tokens must be in 0..--max-new-tokens")
    if args.opening_nats is not None and not 0 <= args.opening_nats <= 100:
        raise ValueError("--opening-nats must be in 0..100")
    if not 1 <= args.batch_size <= 256:
        raise ValueError("--batch-size must be in 1..256")
    set_threads(args.threads)
    hero = LocalHero(cli_settings(args), args.profile, progress=stderr_progress)
    try:
        defaults = parse_field_args(hero.profile, args.field)
        if args.input is not None:
            prompts, payloads = read_prompts(args.input, defaults)
        else:
            prompts, payloads = [args.prompt], [defaults]
        for i, p in enumerate(payloads, start=1):
            try:
                encode_payload(hero.profile, p)  # every payload checked before the slow model load
            except ValueError as exc:
                raise ValueError(f"prompt {i}: {exc}" if args.input else str(exc)) from None
        gens = _generate(hero, args, prompts, payloads)
    finally:
        hero.close()
    if args.input is not None:
        for g in gens:
            emit(g)
    elif args.format == "text":
        sys.stdout.write(gens[0]["text"] + "\n")
    else:
        g = gens[0]
        emit({"text": g["text"], "payload": g["payload"], "key_version": g["key_versions"]["1"],
              "key_versions": g["key_versions"], "tokens": g["tokens"]})


def _generate(hero, args: argparse.Namespace, prompts: list[str], payloads: list[dict[str, int]]) -> list[dict]:
    from tqdm import tqdm

    model = args.model or hero.profile.tokenizer  # the model the profile's tokenizer belongs to
    hero.model(model)  # load first: the bar then counts generated tokens only
    bar = tqdm(total=args.max_new_tokens * -(-len(prompts) // args.batch_size), desc="generating", unit="step",
               file=sys.stderr, leave=False, disable=None)  # disable=None: no bar when stderr is not a terminal
    with bar:
        return hero.generate(prompts, payloads, model=model, max_new_tokens=args.max_new_tokens,
                             min_new_tokens=args.min_new_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p, opening_nats=args.opening_nats, chat=args.chat,
                             batch_size=args.batch_size, on_step=lambda: bar.update(1))
