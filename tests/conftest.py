"""Shared fixtures: isolated HERO_HOME, test vectors, PostgreSQL reachability, the (cached) SmolLM2 model.

Helpers (key sets, the synthetic LM, service and job clients) live in `tests.helpers`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import postgres

VECTORS = Path(__file__).parent / "vectors" / "hero_v1.json"
VECTORS_V2 = Path(__file__).parent / "vectors" / "hero_v2.json"


@pytest.fixture(scope="session")
def vectors() -> dict:
    return json.loads(VECTORS.read_text())


@pytest.fixture(scope="session")
def vectors_v2() -> dict:
    return json.loads(VECTORS_V2.read_text())


@pytest.fixture(autouse=True)
def hero_home(tmp_path, monkeypatch) -> Path:
    """Every test gets its own key store; the model cache stays shared (it is read-only data)."""
    home = tmp_path / "hero"
    monkeypatch.setenv("HERO_HOME", str(home))
    monkeypatch.setenv(
        "HERO_MODEL_CACHE", os.environ.get("HERO_MODEL_CACHE", str(Path.home() / ".hero" / "models"))
    )
    # A test that runs `hero serve --workers N` in this process sets PROMETHEUS_MULTIPROC_DIR (the supervisor's
    # multiprocess mode); set-then-delete records it as absent, so teardown removes it and later tests' /metrics
    # read this process's counters again.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    return home


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A test that configures logging (verifier.base.logs.configure_logging: `hero serve`, the app) leaves the root
    logger as it found it: a handler bound to that test's captured stderr would write to a closed stream in later
    tests, whose one-line error checks then see logging's traceback."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    """None when the test PostgreSQL is reachable, else why not."""
    return postgres.unreachable_reason()


@pytest.fixture
def pg_url(pg_reason) -> Iterator[str]:
    """PostgreSQL only (a private schema): fails, not skips, under HERO_REQUIRE_SERVICES=1 when it is missing."""
    yield from postgres.schema_url(pg_reason)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path, pg_reason) -> Iterator[str]:
    """Both backends: a SQLite file, or a private schema on the real PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
    else:
        yield from postgres.schema_url(pg_reason)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


@pytest.fixture(scope="session")
def smollm2():
    from verifier.lm import load_model

    return load_model("smollm2")


# -- the service: an app wired to the test's database in dev mode (tests.helpers.service) -------------------------
# Here for every folder that tests the service (api, audit, auth, keys, verify, jobs, registry, base); imported
# lazily so a test that needs no app never imports FastAPI.
@pytest.fixture
def make_service(hero_home):
    from tests.helpers.service import service_factory

    yield from service_factory(hero_home)


@pytest.fixture
def svc(db_url, make_service):
    """Service on both backends."""
    return make_service(db_url)


@pytest.fixture
def lite(sqlite_url, make_service):
    """Service on SQLite only (for tests independent of the backend)."""
    return make_service(sqlite_url)


@pytest.fixture
def e2e(pg_reason, tmp_path, make_service):
    """One service for an end-to-end test: the real PostgreSQL when present (required in CI), else SQLite."""
    if pg_reason is None or postgres.REQUIRE:
        gen = postgres.schema_url(pg_reason)
        svc = make_service(next(gen))
        yield svc
        svc.ctx.db.dispose()
        gen.close()
    else:
        yield make_service(f"sqlite:///{tmp_path / 'e2e.db'}")
