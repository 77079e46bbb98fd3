"""`hero --version`, `hero generate --threads` (one thread per process unless told), `hero bench` under the
deployment's profile rule."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from verifier import __version__
from verifier.cli.bench import rule_profile
from verifier.cli.generate import set_threads
from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE

ROOT = Path(__file__).resolve().parents[2]


def test_version_exits_0_printing_the_version():
    r = subprocess.run([sys.executable, "-m", "verifier.cli", "--version"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"hero {__version__}", r.stderr


def test_the_version_is_written_once():
    """The distribution's version is verifier.__version__ (setuptools reads it from the source): pyproject.toml
    and the product's sources hold no second literal that could drift from what `hero --version` prints."""
    from setuptools.config.pyprojecttoml import read_configuration

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert read_configuration(ROOT / "pyproject.toml")["project"]["version"] == __version__
    # nor does any other source of ours (the API's OpenAPI document takes it from verifier.__version__ too)
    literal = f'"{__version__}"'
    copies = [str(p.relative_to(ROOT)) for d in ("verifier", "gpu", "workers") for p in (ROOT / d).rglob("*.py")
              if literal in p.read_text() and p != ROOT / "verifier" / "__init__.py"]
    assert copies == []


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_generate_threads_default_to_one_unless_set(threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert set_threads(None) == 1 and torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert set_threads(None) == 2 and torch.get_num_threads() == 2
    assert set_threads(3) == 3 and torch.get_num_threads() == 3  # --threads wins
    with pytest.raises(ValueError, match="--threads"):
        set_threads(0)


def test_generate_takes_threads_on_the_command_line():
    from verifier.cli import build_parser

    args = build_parser(["generate"]).parse_args(["generate", "--prompt", "x", "--threads", "4"])
    assert args.threads == 4
    assert build_parser(["generate"]).parse_args(["generate", "--prompt", "x"]).threads is None


def test_bench_follows_the_deployments_profile_rule(hero_home, monkeypatch):
    monkeypatch.setenv("HERO_DEV_MODE", "1")
    monkeypatch.setenv("HERO_PROFILE", "v3")
    assert rule_profile(Namespace()) == "v3"
    monkeypatch.delenv("HERO_PROFILE")
    from verifier.cli import main

    assert main(["db", "upgrade"]) == 0
    assert rule_profile(Namespace()) == NEW_DEPLOYMENT_PROFILE  # a new deployment: no keys yet
