"""CLI tests run where the operator has run `hero kek init`: outside dev mode no command mints the KEK or the log
key any more (tests/cli/test_no_secret_minting.py removes them again to show the refusal)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def deployment_secrets(hero_home: Path) -> None:
    from verifier.base.settings import Settings
    from verifier.keys.bootstrap import init_secrets

    init_secrets(Settings(home=hero_home))
