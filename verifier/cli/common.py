"""Helpers shared by CLI commands: profile and key-store resolution."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from verifier.engine.profile import PROFILES_DIR, Profile, load_profile

if TYPE_CHECKING:
    from verifier.db import Database
    from verifier.keys.service import DbKeyStore


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="profile name under policies/profiles or a YAML path")


def resolve_profile(name: str) -> Profile:
    path = PROFILES_DIR / f"{name}.yaml"
    return load_profile(path if path.exists() else name)


def open_database() -> Database:
    """The service database from HERO_* settings; SQLite (embedded default) is migrated on open."""
    from verifier.db import Database, check_schema, upgrade
    from verifier.files import private_dir
    from verifier.settings import Settings

    settings = Settings()
    private_dir(settings.home)
    if settings.should_auto_migrate:
        upgrade(settings.db_url)
    db = Database(settings.db_url)
    check_schema(db)
    return db


def open_store() -> DbKeyStore:
    """The service's encrypted key store (same DB and KEK as `hero serve`)."""
    from verifier.keys.kek import make_kek_provider
    from verifier.keys.service import DbKeyStore
    from verifier.settings import Settings

    return DbKeyStore(open_database(), make_kek_provider(Settings()))


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
