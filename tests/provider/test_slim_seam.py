"""The serving seam needs no service and no model library: `verifier.provider.step` imports, and drives a
generation loop, in a process where FastAPI, SQLAlchemy, Alembic, uvicorn, Celery, pydantic-settings and
transformers cannot be imported (a meta-path finder refuses them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("fastapi", "sqlalchemy", "alembic", "uvicorn", "celery", "pydantic_settings", "transformers", "starlette")

PROGRAM = f"""
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"blocked: {{name}}")
        return None

sys.meta_path.insert(0, Refuse())
import torch
from verifier.provider.step import RequestSlots
from tests.vectors.make_generation_vector import fixed_keyset, opened_bundle
from verifier.engine.profile import default_profile

profile = default_profile()
bundle = opened_bundle(profile, fixed_keyset(profile))
slots = RequestSlots(2, "cpu", lambda: bundle, stop_token=2)
assert slots.admit(0, {{"hero": {{"model": 37, "user": 5}}}}, prompt=[4, 5, 6])
assert not slots.admit(1, {{"hero": {{"user": "x"}}}})
gen = torch.Generator().manual_seed(0)
for _ in range(4):
    out = slots.step(torch.randn(2, profile.vocab_size, generator=gen), [0, 1])
    assert int(out[1].argmax()) == 2 and (torch.isfinite(out).sum(dim=1) == 1).all()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
print("OK", loaded)
"""


def test_the_seam_runs_with_the_service_and_transformers_blocked():
    r = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "OK []"
