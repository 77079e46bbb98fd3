"""Outside dev mode no CLI command mints the KEK or the log signing key: only `hero kek init` does.

Before (7ed75c2) `hero keys init` / `hero keys rotate` on a host without the shared KEK made a local one and
wrapped the new active key under it (no other process could unwrap it), and `hero audit public-key` made a log
key of its own: these tests got exit 0 and a fresh `kek/current` / `checkpoint.key`."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.base.db import upgrade
from verifier.cli import main


@pytest.fixture
def production(hero_home: Path, tmp_path: Path, monkeypatch) -> Path:
    import shutil

    shutil.rmtree(hero_home / "kek")  # what tests/cli/conftest.py made: this host has no secrets
    shutil.rmtree(hero_home / "log")
    url = f"sqlite:///{tmp_path / 'hero.db'}"
    upgrade(url)
    monkeypatch.setenv("HERO_DATABASE_URL", url)
    monkeypatch.setenv("HERO_PROFILE", "default")
    monkeypatch.delenv("HERO_DEV_MODE", raising=False)
    return hero_home


@pytest.mark.parametrize("argv", [["keys", "init"], ["keys", "rotate", "--level", "1"], ["keys", "list"]])
def test_key_commands_refuse_without_the_shared_kek(production, argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HERO_KEK_DIR" in err and "hero kek init" in err, err
    assert not (production / "kek").exists()


@pytest.mark.parametrize("argv", [["audit", "public-key"], ["audit", "checkpoint"]])
def test_audit_commands_refuse_without_the_log_key(production, argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "HERO_LOG_KEY_FILE" in err and "hero kek init" in err, err
    assert not (production / "log" / "checkpoint.key").exists()


def test_after_kek_init_the_commands_use_what_it_made(production, capsys):
    assert main(["kek", "init"]) == 0
    kek = sorted(p.name for p in (production / "kek").iterdir())
    assert main(["keys", "init"]) == 0 and main(["keys", "rotate", "--level", "1"]) == 0
    assert main(["audit", "public-key"]) == 0
    assert sorted(p.name for p in (production / "kek").iterdir()) == kek  # nothing new minted
    capsys.readouterr()


def test_dev_mode_still_makes_them(production, monkeypatch):
    monkeypatch.setenv("HERO_DEV_MODE", "1")
    assert main(["keys", "init"]) == 0 and main(["audit", "public-key"]) == 0
    assert (production / "kek" / "current").exists() and (production / "log" / "checkpoint.key").exists()
