"""Helpers shared by CLI commands: profile and key-store resolution."""

from __future__ import annotations

import argparse
import json
import sys

from verifier.engine.keystore import FileKeyStore, KeyStore
from verifier.engine.profile import PROFILES_DIR, Profile, load_profile


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="profile name under policies/profiles or a YAML path")


def resolve_profile(name: str) -> Profile:
    path = PROFILES_DIR / f"{name}.yaml"
    return load_profile(path if path.exists() else name)


def open_store() -> KeyStore:
    """The embedded key store (the service's encrypted store plugs in here)."""
    return FileKeyStore()


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
