"""scripts/install changes nothing system-wide unasked: wrk comes from apt-get only on request
(HERO_INSTALL_WRK=1 or `scripts/install_wrk --yes`), and without the request the script says how to get it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, uid: str = "0", **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """scripts/install_wrk with no wrk on PATH, a recording apt-get and `id -u` answering `uid`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    for tool in ("apt-get", "id"):
        (bin_dir / tool).chmod(0o755)
    bash = shutil.which("bash")
    assert bash
    r = subprocess.run([bash, str(ROOT / "scripts" / "install_wrk"), *args], capture_output=True, text=True,
                       env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp"), **env}, timeout=60)
    return r, calls.read_text().splitlines() if calls.exists() else []


def test_wrk_is_not_apt_installed_unasked_even_as_root(tmp_path):
    r, calls = _run(tmp_path)
    assert r.returncode == 0 and calls == []
    assert "HERO_INSTALL_WRK=1" in r.stderr  # says how, instead of installing silently


@pytest.mark.parametrize("how", [{"HERO_INSTALL_WRK": "1"}, {"args": "--yes"}])
def test_wrk_is_apt_installed_on_request(tmp_path, how):
    args = (how.pop("args"),) if "args" in how else ()
    r, calls = _run(tmp_path, *args, **how)
    assert r.returncode == 0 and calls == ["install -y -q wrk"]
    assert "apt-get install wrk" in r.stderr
    r, calls = _run(tmp_path, *args, uid="1000", **how)  # not root: no second apt-get call, and it says why
    assert calls == ["install -y -q wrk"] and "needs root" in r.stderr

