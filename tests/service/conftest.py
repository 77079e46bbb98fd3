"""Service fixtures: an app wired to the test's database in dev mode (see tests.helpers.service)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers.postgres import REQUIRE, schema_url
from tests.helpers.service import Service, service_factory


@pytest.fixture
def make_service(hero_home) -> Iterator[Callable[..., Service]]:
    yield from service_factory(hero_home)


@pytest.fixture
def svc(db_url, make_service) -> Service:
    """Service on both backends."""
    return make_service(db_url)


@pytest.fixture
def lite(sqlite_url, make_service) -> Service:
    """Service on SQLite only (for tests independent of the backend)."""
    return make_service(sqlite_url)


@pytest.fixture
def e2e(pg_reason, tmp_path, make_service) -> Iterator[Service]:
    """One service for an end-to-end test: the real PostgreSQL when present (required in CI), else SQLite."""
    if pg_reason is None or REQUIRE:
        gen = schema_url(pg_reason)
        svc = make_service(next(gen))
        yield svc
        svc.ctx.db.dispose()
        gen.close()
    else:
        yield make_service(f"sqlite:///{tmp_path / 'e2e.db'}")
