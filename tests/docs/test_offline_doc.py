"""docs/offline.md's Python block runs as written (the offline API: generate and decode without a service)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.model
def test_the_offline_example_runs_as_written(hero_home):
    (code,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "offline.md").read_text(), re.S)
    env = {k: v for k, v in os.environ.items() if k != "HERO_PROFILE"} | {"HERO_DEV_MODE": "1"}  # a local KEK
    # the deployment the document describes: spec v5, model ids 37 and 38 issued
    assert subprocess.run([sys.executable, "-m", "verifier.cli", "keys", "init", "--models", "37,38"], env=env,
                          cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[:2] == ["{'model': 37, 'user': 3001} 100 {'1': 'l1-v1', '2': 'l2-v1'}",
                         "{'model': 38, 'user': 3002} 100 {'1': 'l1-v1', '2': 'l2-v1'}"], lines
    assert lines[2:] == ["True {'model': 37} True", "True {'model': 38} True"], lines
