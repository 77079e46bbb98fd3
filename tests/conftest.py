"""Shared fixtures: isolated HERO_HOME, synthetic key sets, and the (cached) SmolLM2 model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

VECTORS = Path(__file__).parent / "vectors" / "hero_v1.json"
VECTORS_V2 = Path(__file__).parent / "vectors" / "hero_v2.json"


@pytest.fixture(scope="session")
def vectors() -> dict:
    return json.loads(VECTORS.read_text())


@pytest.fixture(scope="session")
def vectors_v2() -> dict:
    return json.loads(VECTORS_V2.read_text())


@pytest.fixture(autouse=True)
def hero_home(tmp_path, monkeypatch) -> Path:
    """Every test gets its own key store; the model cache stays shared (it is read-only data)."""
    home = tmp_path / "hero"
    monkeypatch.setenv("HERO_HOME", str(home))
    monkeypatch.setenv(
        "HERO_MODEL_CACHE", os.environ.get("HERO_MODEL_CACHE", str(Path.home() / ".hero" / "models"))
    )
    return home


def make_keyset(profile, seed: int = 0):
    """Key set with fresh CSPRNG masters (seed only names the versions)."""
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret

    return KeySet(
        tuple(
            derive_level_table(new_master_secret(), profile, lv, f"l{lv}-v{seed}")
            for lv in range(1, profile.depth + 1)
        )
    )


@pytest.fixture(scope="session")
def smollm2():
    from verifier.engine.models import load_model

    return load_model("smollm2")
