"""Which profile a deployment serves: one rule for the API, the workers and every CLI command.

1. HERO_PROFILE (or a command's --profile) when set;
2. else the profile recorded in the key store's database (`hero profile use NAME`, migration 0013): a
   deployment moved to another profile serves it in every process, and keeps decoding texts made under the
   profiles it served before (verifier/verify/runner.py);
3. else the profile the deployment's keys were made with (an existing deployment keeps its profile);
4. else, no keys yet (a new deployment): NEW_DEPLOYMENT_PROFILE, the best spec this release ships.

A store holding keys of several profiles without a recorded choice (e.g. `v1` beside `default` after the spec v2
upgrade) serves `default` when it is one of them (HERO_PROFILE's old default, what such a deployment served);
otherwise the choice is the operator's, and asked for (`hero profile use NAME`), never guessed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from verifier.base.db import Database

LEGACY_DEFAULT = "default"  # HERO_PROFILE's default before this rule
SERVED_PROFILE = "served_profile"  # the hero_deployment_settings key of the recorded choice


class ProfileChoiceError(ValueError):
    """The deployment's profile cannot be chosen without the operator (the message says how to choose)."""


def stored_profiles(db: Database) -> list[str]:
    """Names of the profiles with key versions in this deployment's store, sorted."""
    from sqlalchemy import select

    from verifier.keys.models import KeyVersionRow

    with db.session() as s:
        return sorted(s.scalars(select(KeyVersionRow.profile).distinct()))


def recorded_profile(db: Database) -> str | None:
    """The profile recorded as served (`hero profile use`), None when none was."""
    from verifier.keys.models import DeploymentSettingRow

    with db.session() as s:
        row = s.get(DeploymentSettingRow, SERVED_PROFILE)
        return row.value if row is not None else None


def record_profile(s: Session, name: str) -> str | None:
    """Record `name` as the served profile in the caller's transaction; returns the one recorded before."""
    from verifier.keys.models import DeploymentSettingRow

    now = datetime.now(UTC).replace(microsecond=0)
    row = s.get(DeploymentSettingRow, SERVED_PROFILE, with_for_update=True)
    if row is None:
        s.add(DeploymentSettingRow(key=SERVED_PROFILE, value=name, updated_at=now))
        s.flush()
        return None
    before, row.value, row.updated_at = row.value, name, now
    return before


def choose_profile(configured: str | None, stored: list[str], recorded: str | None = None) -> str:
    """The profile name the rule above picks, from HERO_PROFILE / --profile, the recorded choice and the store's
    profile names."""
    if configured:
        return configured
    if recorded:
        return recorded
    if not stored:
        return NEW_DEPLOYMENT_PROFILE
    if len(stored) == 1:
        return stored[0]
    if LEGACY_DEFAULT in stored:
        return LEGACY_DEFAULT
    raise ProfileChoiceError(
        f"this deployment has keys for profiles {', '.join(stored)}: run `hero profile use NAME` to record which "
        "one it serves (or set HERO_PROFILE, or pass --profile)"
    )


def deployment_profile(configured: str | None, db: Database) -> str:
    """The profile this deployment serves (see the module docstring)."""
    return configured or choose_profile(None, stored_profiles(db), recorded_profile(db))
