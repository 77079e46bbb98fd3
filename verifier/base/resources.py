"""Where things live: the project's data files (policies/, migrations/, alembic.ini) and HERO_HOME.

A source checkout finds the data files next to the package; an installed package (e.g. the container
image) points HERO_ROOT at the directory that holds them.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("HERO_ROOT")
    # verifier/base/resources.py -> the checkout
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[2]


def hero_home() -> Path:
    """$HERO_HOME (default ~/.hero): the service settings' `home`, and the model cache's parent."""
    return Path(os.environ.get("HERO_HOME") or "~/.hero").expanduser()
