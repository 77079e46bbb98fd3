"""Run test code under Triton's CPU interpreter: TRITON_INTERPRET=1 is read when triton is imported, so the code
runs in its own process (from the repository root); it must print 'ok' when its checks pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def assert_passes_interpreted(code: str, timeout: float = 900) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"},
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
