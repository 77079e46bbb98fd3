"""Helpers shared by CLI commands: settings (read once per command), profile and key-store resolution.

The database and key store come from verifier.process, built exactly as the API and the workers build them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from verifier.engine.profile import resolve_profile

if TYPE_CHECKING:
    from verifier.base.db import Database
    from verifier.base.settings import Settings
    from verifier.engine.profile import Profile
    from verifier.keys.service import DbKeyStore

__all__ = ["add_profile_arg", "cli_settings", "command_profile", "configured_profile", "emit",
           "open_database", "open_store", "resolve_profile"]


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None,
                   help="profile name under policies/profiles or a YAML path (default: HERO_PROFILE, else the "
                   "profile of this deployment's keys, else the new-deployment profile)")


def configured_profile(args: argparse.Namespace) -> str | None:
    """The profile named for this command: --profile, else HERO_PROFILE; None lets the key store decide."""
    return getattr(args, "profile", None) or cli_settings(args).profile


def command_profile(args: argparse.Namespace, store: DbKeyStore) -> Profile:
    """The profile a command works with: the one rule of every process (verifier.keys.deployment)."""
    from verifier.keys.deployment import deployment_profile

    return resolve_profile(deployment_profile(configured_profile(args), store.db))


def cli_settings(args: argparse.Namespace | None = None) -> Settings:
    """The HERO_* settings of this command, read from the environment once."""
    from verifier.base.settings import Settings

    cached = getattr(args, "hero_settings", None)
    if cached is None:
        cached = Settings()
        if args is not None:
            args.hero_settings = cached
    return cached


def open_database(settings: Settings | None = None) -> Database:
    """The service database (verifier.process.open_database), checked to be at the schema head."""
    from verifier import process

    return process.open_database(settings or cli_settings(), check=True)


def open_store(settings: Settings | None = None) -> DbKeyStore:
    """The service's encrypted key store (same DB and KEK as `hero serve`)."""
    from verifier import process

    return process.open_store(settings or cli_settings())


def read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 file (`-`: standard input) for the batch commands; a clear ValueError otherwise."""
    from pathlib import Path

    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
