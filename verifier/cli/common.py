"""Helpers shared by CLI commands: settings (read once per command), profile and key-store resolution.

The database and key store come from verifier.process, built exactly as the API and the workers build them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from verifier.engine.profile import resolve_profile

if TYPE_CHECKING:
    from verifier.db import Database
    from verifier.keys.service import DbKeyStore
    from verifier.settings import Settings

__all__ = ["add_profile_arg", "cli_actor", "cli_settings", "emit", "open_database", "open_store", "resolve_profile"]


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="profile name under policies/profiles or a YAML path")


def cli_settings(args: argparse.Namespace | None = None) -> Settings:
    """The HERO_* settings of this command, read from the environment once."""
    from verifier.settings import Settings

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


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def cli_actor(action: str = "cli"):
    """Who a CLI change is audited as: the OS user, role `cli`, a fresh id for this invocation."""
    import getpass
    import uuid

    from verifier.audit.service import Actor

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid-{os.getuid()}"
    return Actor(user, "cli", f"cli-{uuid.uuid4().hex}")
