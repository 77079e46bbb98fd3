"""The real PostgreSQL for tests: reachability, and a private schema per test.

PostgreSQL is at HERO_TEST_PG_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test). When it
is unreachable the postgres cases skip, unless HERO_REQUIRE_SERVICES=1, where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

PG_URL = os.environ.get("HERO_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE = os.environ.get("HERO_REQUIRE_SERVICES") == "1"


def unreachable_reason() -> str | None:
    """None when PostgreSQL is reachable, else why not."""
    try:
        eng = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with eng.connect() as c:
            c.execute(text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:  # any failure: not reachable
        return f"PostgreSQL at {PG_URL} unreachable: {exc.__class__.__name__}"


def need(reason: str | None) -> None:
    """Skip (or fail, with HERO_REQUIRE_SERVICES=1) when a service is missing for `reason`."""
    if reason is None:
        return
    if REQUIRE:
        pytest.fail(f"HERO_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def schema_url(reason: str | None) -> Iterator[str]:
    """A fresh schema for one test (dropped afterwards), as a URL whose search_path is that schema."""
    need(reason)
    schema = f"hero_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
