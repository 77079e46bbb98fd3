"""The provider's base install, for real: scripts/check-base-install makes a fresh venv, installs the CPU torch
wheel and then this project without extras (not editable), and from outside the checkout opens a signed bundle,
generates through the serving seam and detects the mark, with FastAPI, SQLAlchemy, Celery and transformers not
installed. tests/provider/test_slim_seam.py checks the same seam inside the dev venv with those imports blocked;
this one catches what only a real install shows (a base dependency missing from pyproject.toml, a module or data
file left out of the wheel, an import of a service package on the provider's path).

Skipped only when the package index cannot be reached (checked first with a one-package `pip download`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-base-install"
# distribution names of the service's packages and the model libraries: none of them in the base install
NOT_IN_BASE = {"fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "celery", "kombu", "redis", "psycopg",
               "pydantic", "pydantic-settings", "pyjwt", "limits", "transformers", "accelerate"}


def _index_reachable(tmp_path: Path) -> str | None:
    """None when a package can be downloaded; else pip's last words (why the install could not run)."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(tmp_path / "dl"),
                        "--timeout", "15", "--retries", "1", "rfc8785"],
                       capture_output=True, text=True, timeout=180)
    if r.returncode == 0:
        return None
    return (r.stderr.strip().splitlines() or ["pip download failed"])[-1]


@pytest.mark.slow
def test_the_base_install_generates_and_detects_without_the_service(tmp_path):
    why = _index_reachable(tmp_path)
    if why is not None:
        pytest.skip(f"the package index is unreachable, so no fresh venv can be installed: {why}")
    dev = [sys.prefix] if sys.prefix != sys.base_prefix else []  # this venv: the full install, for the sizes
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([str(SCRIPT), *dev], cwd=tmp_path, capture_output=True, text=True, timeout=1500, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] is True
    check = out["check"]
    assert check["absent"] == {"fastapi": True, "sqlalchemy": True, "celery": True, "transformers": True}
    assert check["fields"] == [{"model": 2, "user": 1234}, {"model": 3, "user": 77}]
    marked, plain = check["log10_p_value"][:2], check["log10_p_value"][2]
    assert max(marked) < -20 and plain > -4, check["log10_p_value"]
    names = set(check["distributions"])
    assert {"hero-verifier", "torch", "numpy", "cryptography", "rfc8785"} <= names
    assert not names & NOT_IN_BASE, sorted(names & NOT_IN_BASE)
    base = out["base"]
    assert base["distributions"] == len(names), (base, names)  # pip list sees what the program saw
    assert base["site_packages_mb"] > 0
    if dev:
        assert out["dev"]["distributions"] > base["distributions"], out
        assert out["dev"]["site_packages_mb"] > base["site_packages_mb"], out
