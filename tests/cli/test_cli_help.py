"""`hero`'s help and completion: every argument of every command has help text, every option that takes a value
and has a default shows it in `--help` (the parser's own value, not a copy in prose), and `hero completion`
writes a shell script that completes the real commands and flags."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from verifier.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def arguments(parser: argparse.ArgumentParser, path: str | None = None) -> Iterator[
        tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """(command path, parser, argument) of every argument in the tree, subcommands walked once each."""
    path = path or parser.prog
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # an alias names the same parser
                    seen.add(id(child))
                    yield from arguments(child, f"{path} {name}")
        else:
            yield path, parser, action


def has_a_default(action: argparse.Action) -> bool:
    """An option that takes a value and defaults to one (None, or an empty list for a repeatable option, is no
    value; a flag's default is only its absence)."""
    d = action.default
    return (bool(action.option_strings) and action.nargs != 0 and d is not None and d is not argparse.SUPPRESS
            and d != [])


def problems(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments without help text, and options whose rendered help does not show their default."""
    out = []
    for path, owner, action in arguments(parser):
        name = f"{path} {'/'.join(action.option_strings) or action.dest}"
        if action.help == argparse.SUPPRESS:
            continue  # hidden on purpose
        if not (action.help or "").strip():
            out.append(f"{name}: no help text")
        elif has_a_default(action) and str(action.default) not in owner._get_formatter()._expand_help(action):
            out.append(f"{name}: help does not show its default {action.default!r}")
    return out


def test_every_argument_has_help_and_every_default_is_shown():
    parser = build_parser([], full=True)
    assert {path.split()[1] for path, _, _ in arguments(parser) if path != "hero"} == set(COMMANDS)  # all walked
    assert problems(parser) == []


def test_the_check_finds_a_missing_help_and_a_hidden_default():
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    cmd = sub.add_parser("cmd")
    cmd.add_argument("--quiet", action="store_true", help="a flag: its default is not shown")
    cmd.add_argument("--name", default=None, help="no default to show")
    cmd.add_argument("--level", type=int, default=2)
    cmd.add_argument("--tokens", type=int, default=48, help="tokens per text")
    cmd.add_argument("--ttl", type=int, default=60, help="seconds (default %(default)s)")
    assert problems(parser) == ["x cmd --level: no help text", "x cmd --tokens: help does not show its default 48"]


def test_hero_help_shows_the_parsers_default():
    cmd = build_parser(["token"], full=False)._subparsers._group_actions[0].choices["token"]
    ttl = next(a for a in cmd._actions if "--ttl" in a.option_strings)
    assert f"(default: {ttl.default})" in cmd.format_help()


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_the_commands_and_their_flags(shell, capsys):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for word in ("keys", "decode", "jobs", "completion", "--levels", "--max-new-tokens", "move-profile"):
        assert word in script, word
    if shell == "bash":
        assert "-F _shtab_hero hero" in script.splitlines()[-1]  # registered for the `hero` command


def test_completion_script_sources_in_bash(tmp_path):
    """The bash script is valid bash, and its completion function completes commands and a command's flags;
    writing it loads every command's parser but none of their heavy packages."""
    bash = subprocess.run(["bash", "-c", "true"], capture_output=True)
    if bash.returncode != 0:
        pytest.skip("no bash")
    script = tmp_path / "hero.bash"
    probe = ("import sys; from verifier.cli import main; main(['completion', 'bash']); "
             "print('HEAVY=' + ','.join(m for m in ('torch', 'numpy', 'fastapi', 'sqlalchemy', 'transformers') "
             "if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr.strip().splitlines()[-1] == "HEAVY=", r.stderr
    script.write_text(r.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        probe = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
                 f"COMP_POINT={len(line)}; _shtab_hero; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert complete("hero", "comp") == ["completion"]
    assert sorted(complete("hero", "ke")) == ["kek", "keys"]
    assert complete("hero", "keys", "rotate", "--le") == ["--level"]
