"""Outside dev mode nothing mints the KEK or the log signing key: the service and workers refuse to start with one
line naming `hero kek init`, which makes them once and never replaces them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.service import make_settings
from verifier.keys.bootstrap import SecretsMissing, init_secrets, require_secrets


def _env(home, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    env.update(HERO_HOME=str(home), HERO_DATABASE_URL=f"sqlite:///{home / 'hero.db'}", **extra)
    return env


def test_hero_serve_refuses_to_start_without_secrets_in_one_line(tmp_path):
    home = tmp_path / "home"
    r = subprocess.run([sys.executable, "-m", "verifier.cli", "serve", "--port", "1"], env=_env(home),
                       capture_output=True, text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("hero: error: refusing to start") and "`hero kek init`" in lines[0]
    assert "HERO_KEK_PROVIDER" in lines[0] and "log signing key" in lines[0]
    assert not (home / "kek").exists() and not (home / "log").exists()  # nothing was minted


def test_kek_init_makes_both_once_then_the_service_starts(tmp_path, sqlite_url):
    settings = make_settings(tmp_path / "home", sqlite_url, dev_mode=False)
    with pytest.raises(SecretsMissing, match="hero kek init"):
        require_secrets(settings)
    r = subprocess.run([sys.executable, "-m", "verifier.cli", "kek", "init"], env=_env(tmp_path / "home"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    made = json.loads(r.stdout)
    assert made["kek_id"].startswith("local-") and len(made["created"]) == 2
    key_file = settings.log_key_path.read_bytes()
    require_secrets(settings)  # both exist now
    again = init_secrets(settings)
    assert again["created"] == [] and again["kek_id"] == made["kek_id"] and again["log_vkey"] == made["log_vkey"]
    assert settings.log_key_path.read_bytes() == key_file  # never replaced


def test_workers_need_the_kek_only_and_dev_mode_needs_nothing(tmp_path, sqlite_url):
    settings = make_settings(tmp_path / "home", sqlite_url, dev_mode=False)
    with pytest.raises(SecretsMissing) as err:
        require_secrets(settings, log_key=False)
    assert "KEK" in str(err.value) and "log signing key" not in str(err.value)
    require_secrets(make_settings(tmp_path / "other", sqlite_url, dev_mode=True))  # dev mode makes them on use
    kms = make_settings(tmp_path / "kms", sqlite_url, dev_mode=False, kek_provider="aws-kms")
    with pytest.raises(SecretsMissing) as err:
        require_secrets(kms)  # the KEK lives in the KMS; the log key is still a file
    assert "KEK" not in str(err.value).split("without an existing")[1].split(":")[0]
