"""A CPU-only process never imports Triton: an app serving and decoding on the CPU, as `hero serve`
builds it, has no `triton` module loaded, so its exit prints no `nanobind: leaked ... triton` lines and pays no
Triton import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from fastapi.testclient import TestClient
from verifier.api.app import create_app
from verifier.base.settings import Settings
app = create_app(Settings(dev_mode=True))
with TestClient(app) as c:
    assert c.post("/v1/keys/init", headers={"Authorization": "Bearer " + sys.argv[1]}).status_code in (201, 401)
    from verifier.engine.decoder import Decoder  # the decode path's modules, as a first /v1/verify loads them
    import gpu.evidence, gpu.step
print("TRITON=" + ",".join(m for m in sys.modules if m == "triton" or m.startswith("triton.")))
"""


def test_a_cpu_process_never_imports_triton(tmp_path):
    env = {**os.environ, "HERO_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", PROBE, "no-token"], cwd=Path(__file__).resolve().parents[2], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "TRITON=", r.stdout[-500:]
    assert "nanobind" not in r.stderr
