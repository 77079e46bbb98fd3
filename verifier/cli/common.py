"""Helpers shared by CLI commands: settings (read once per command), profile and key-store resolution."""

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
    """The service database; SQLite (embedded default) is migrated on open, others must be at head."""
    from verifier.db import Database, check_schema, upgrade
    from verifier.secretfile import private_dir

    settings = settings or cli_settings()
    private_dir(settings.home)
    if settings.should_auto_migrate:
        upgrade(settings.db_url)
    db = Database(settings.db_url)
    check_schema(db)  # one line ("run `hero db upgrade`") instead of a traceback on an un-migrated DB
    return db


def open_store(settings: Settings | None = None) -> DbKeyStore:
    """The service's encrypted key store (same DB and KEK as `hero serve`)."""
    from verifier.jobs.kek_rotation import rotate_kek
    from verifier.keys.kek import make_kek_provider
    from verifier.keys.service import DbKeyStore

    settings = settings or cli_settings()
    return DbKeyStore(open_database(settings), make_kek_provider(settings), rekey=rotate_kek)


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
