"""`hero decode`: detect and decode a text for the requested levels, as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verifier.cli.common import add_profile_arg, cli_settings, emit, open_store, resolve_profile
from verifier.engine.decoder import DEFAULT_ALPHA, DecodeError, Decoder


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="decode the payload of a text")
    p.add_argument("--levels", default="1", help="levels to decode: '1' or '1,2' (must start at 1)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text")
    src.add_argument("--file", help="file holding the text ('-' = stdin)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance for 'watermarked'")
    add_profile_arg(p)
    p.set_defaults(handler=cmd_decode)


def parse_levels(raw: str) -> int:
    try:
        levels = sorted({int(x) for x in raw.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--levels expects comma-separated integers, got {raw!r}") from None
    if not levels or levels != list(range(1, levels[-1] + 1)):
        raise ValueError(f"--levels must be 1..n without gaps (e.g. 1 or 1,2), got {raw!r}")
    return levels[-1]


def read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        return args.text
    if args.file is None:
        raise ValueError("give --text or --file")
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{args.file} is not UTF-8 text") from None


def cmd_decode(args: argparse.Namespace) -> None:
    profile = resolve_profile(args.profile)
    max_level = parse_levels(args.levels)
    if max_level > profile.depth:
        raise ValueError(f"profile {profile.name!r} has only {profile.depth} levels")
    text = read_text(args)
    if not text.strip():
        raise DecodeError("text is empty")
    tables = open_store(cli_settings(args)).verification_tables(profile, max_level)
    if max(tables) < max_level:
        raise DecodeError(f"no usable keys for level {max(tables) + 1}")
    from verifier.lm import load_tokenizer

    decoder = Decoder(profile, tables, alpha=args.alpha)
    (result,) = decoder.decode_texts([text], load_tokenizer(profile.tokenizer))
    emit(result.to_dict())
