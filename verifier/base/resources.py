"""Where things live: the project's data files (policies/, migrations/, alembic.ini) and HERO_HOME.

A source checkout finds the data files next to the package; an installed package (e.g. the container
image) points HERO_ROOT at the directory that holds them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def project_root() -> Path:
    """HERO_ROOT; else the source checkout this package sits in; else the data files a wheel installed under
    <prefix>/share/hero-verifier (pyproject.toml `data-files`: policies/, migrations/, alembic.ini), so a plain
    `pip install` finds the shipped profiles and the schema without a checkout."""
    env = os.environ.get("HERO_ROOT")
    if env:
        return Path(env).expanduser()
    checkout = Path(__file__).resolve().parents[2]  # verifier/base/resources.py -> the checkout
    installed = Path(sys.prefix) / "share" / "hero-verifier"
    if not (checkout / "policies").is_dir() and (installed / "policies").is_dir():
        return installed
    return checkout


def hero_home() -> Path:
    """$HERO_HOME (default ~/.hero): the service settings' `home`, and the model cache's parent."""
    return Path(os.environ.get("HERO_HOME") or "~/.hero").expanduser()
