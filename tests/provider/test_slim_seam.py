"""The serving seam needs no service and no model library: `verifier.provider.step` imports, and drives a
generation loop, and the provider's detector (`verifier.provider.detector`) decodes it, in a process where the
service's packages (FastAPI, SQLAlchemy, Alembic, uvicorn, Celery, redis, psycopg, pydantic, ...) and transformers
cannot be imported (a meta-path finder refuses them). pyproject.toml's base dependencies hold none of the service's
packages (they are the `service` extra, which `all` includes), and `hero serve` without them says which extra to
install, in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# import names of the `service` extra's packages (and their frameworks), and transformers
SERVICE_MODULES = ("fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "uvloop", "httptools", "celery", "kombu",
                   "redis", "psycopg", "pydantic", "pydantic_settings", "jwt", "fastapi_offline", "limits")
BLOCKED = (*SERVICE_MODULES, "transformers")
# distribution names of the service's packages: none of them in the base install
SERVICE_PACKAGES = {"fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "uvloop", "httptools", "celery",
                    "redis", "psycopg", "pydantic", "pydantic-settings", "pyjwt", "fastapi-offline", "limits"}

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
from verifier.provider.detector import HeroWatermarkDetector
detected = HeroWatermarkDetector(bundle)([[4, 5, 6, 7, 8, 9, 10, 11]])
assert detected.prediction.shape == (1,) and detected.fields == [{{"model": None, "user": None}}]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
print("OK", loaded)
"""


def test_the_seam_runs_with_the_service_and_transformers_blocked():
    r = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "OK []"


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_the_base_install_holds_none_of_the_service_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    assert not base & SERVICE_PACKAGES, sorted(base & SERVICE_PACKAGES)
    assert {"torch", "numpy", "cryptography"} <= base
    extras = project["optional-dependencies"]
    service = {_name(r) for r in extras["service"]} | {
        _name(r) for extra in ("postgres", "workers") for r in extras[extra]}
    assert SERVICE_PACKAGES - {"starlette"} <= service  # starlette comes with FastAPI
    assert "hero-verifier[postgres,workers]" in extras["service"]
    [everything] = extras["all"]
    assert "service" in everything.split("[")[1].rstrip("]").split(",")
    # what installs the service names the extra
    assert '[service,' in (ROOT / "Dockerfile").read_text()
    assert '".[all,dev,gpu]"' in (ROOT / "scripts/install").read_text()


def test_the_transformers_extra_is_what_the_adapters_need_and_models_builds_on_it():
    """A provider with its own model installs `transformers` alone; `models` (GGUF loading) includes it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "transformers" in {_name(r) for r in extras["transformers"]}
    assert not {_name(r) for r in extras["transformers"]} & (SERVICE_PACKAGES | {"gguf", "accelerate"})
    assert "hero-verifier[transformers]" in extras["models"]
    [everything] = extras["all"]
    assert "models" in everything.split("[")[1].rstrip("]").split(",")


MISSING = f"""
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {SERVICE_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from verifier.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_hero_commands_of_the_service_name_the_extra_in_one_line():
    for argv in (["serve"], ["db", "upgrade"], ["worker"], ["keys", "list"]):
        r = subprocess.run([sys.executable, "-c", MISSING, *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2, (argv, r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith(f"hero: error: `hero {argv[0]}` needs the 'service' extra (no module "), r.stderr
        assert "pip install 'hero-verifier[service]'" in r.stderr
    r = subprocess.run([sys.executable, "-c", MISSING, "--version"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("hero "), r.stderr
