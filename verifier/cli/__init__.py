"""`hero` console script: each command group lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from verifier.cli import bench, decode, evaluate, generate, keys, providers, service, worker
from verifier.errors import DomainError

CommandError = (DomainError, ValueError, RuntimeError, OSError, LookupError)
COMMAND_MODULES = [keys, generate, decode, service, bench, worker, evaluate, providers]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hero", description="HeRo selective-disclosure watermarking")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int | None] = args.handler
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("hero: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        message = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        print(f"hero: error: {message}", file=sys.stderr)
        return 2
    except Exception as exc:
        from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError

        if not isinstance(exc, SQLAlchemyError):
            raise
        if isinstance(exc, ProgrammingError):  # e.g. a table that does not exist yet
            message = "the database schema is missing or outdated; run `hero db upgrade`"
        elif isinstance(exc, OperationalError):
            message = f"database unavailable or busy ({exc.orig.__class__.__name__})"
        else:
            message = f"database error ({exc.__class__.__name__})"
        print(f"hero: error: {message}", file=sys.stderr)  # one line: no SQL, no parameters
        return 2


if __name__ == "__main__":
    sys.exit(main())
