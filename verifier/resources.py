"""Where the project's data files live (policies/, migrations/, alembic.ini).

A source checkout finds them next to the package; an installed package (e.g. the container image)
points HERO_ROOT at the directory that holds them.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("HERO_ROOT")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[1]
