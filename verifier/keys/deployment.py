"""Which profile a deployment serves: one rule for the API, the workers and every CLI command.

1. HERO_PROFILE (or a command's --profile) when set;
2. else the profile the deployment's keys were made with (an existing deployment keeps its profile);
3. else, no keys yet (a new deployment): NEW_DEPLOYMENT_PROFILE, the best spec this release ships.

A store holding keys of several profiles (e.g. `v1` beside `default` after the spec v2 upgrade) serves
`default` when it is one of them (HERO_PROFILE's old default, what such a deployment served); otherwise the
choice is the operator's, and asked for, never guessed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE

if TYPE_CHECKING:
    from verifier.db import Database

LEGACY_DEFAULT = "default"  # HERO_PROFILE's default before this rule


class ProfileChoiceError(ValueError):
    """The deployment's profile cannot be chosen without the operator (the message says how to choose)."""


def stored_profiles(db: Database) -> list[str]:
    """Names of the profiles with key versions in this deployment's store, sorted."""
    from sqlalchemy import select

    from verifier.keys.models import KeyVersionRow

    with db.session() as s:
        return sorted(s.scalars(select(KeyVersionRow.profile).distinct()))


def choose_profile(configured: str | None, stored: list[str]) -> str:
    """The profile name the rule above picks, from HERO_PROFILE / --profile and the store's profile names."""
    if configured:
        return configured
    if not stored:
        return NEW_DEPLOYMENT_PROFILE
    if len(stored) == 1:
        return stored[0]
    if LEGACY_DEFAULT in stored:
        return LEGACY_DEFAULT
    raise ProfileChoiceError(
        f"this deployment has keys for profiles {', '.join(stored)}: set HERO_PROFILE (or pass --profile) to "
        "say which one it serves"
    )


def deployment_profile(configured: str | None, db: Database) -> str:
    """The profile this deployment serves (see the module docstring)."""
    return configured or choose_profile(None, stored_profiles(db))
