"""Fixtures of the verify tests: an app wired to a SQLite database in dev mode (tests.helpers.service)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers.service import Service, service_factory


@pytest.fixture
def make_service(hero_home) -> Iterator[Callable[..., Service]]:
    yield from service_factory(hero_home)


@pytest.fixture
def lite(sqlite_url, make_service) -> Service:
    """Service on SQLite (these tests do not depend on the backend)."""
    return make_service(sqlite_url)
