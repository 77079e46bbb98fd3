"""`hero completion bash|zsh|tcsh`: the shell completion script, made by `shtab` from the CLI's own parser with
every command registered, so it completes exactly the commands and flags the CLI has (no list to keep in step).

    hero completion bash > ~/.local/share/bash-completion/completions/hero
    hero completion zsh > "${fpath[1]}/_hero"
"""

from __future__ import annotations

import argparse
import sys

SHELLS = ("bash", "zsh", "tcsh")  # what shtab writes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or tcsh)",
                       description="Print the completion script of every hero command and flag for SHELL on "
                       "stdout; source it, or save it where the shell loads completions.")
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=f"the shell to complete in: {', '.join(SHELLS)}")
    p.set_defaults(handler=run)


def script(full_parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` over the parser with every command registered."""
    import shtab

    return shtab.complete(full_parser, shell=shell)


def run(args: argparse.Namespace) -> int:
    # `full_parser`: the root's factory of that parser, set by verifier.cli.build_parser (importing it here would
    # close an import cycle with its command table)
    sys.stdout.write(script(args.full_parser(), args.shell))
    return 0
