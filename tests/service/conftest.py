"""Service fixtures: a DB per test (SQLite file, or a private schema on the real PostgreSQL) and an app
wired to it in dev mode (see tests.helpers.service)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers import postgres
from tests.helpers.service import Service, service_factory


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path, pg_reason) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
    else:
        yield from postgres.schema_url(pg_reason)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


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
