"""Service fixtures: a DB per test (SQLite file, or a private schema on the real PostgreSQL), an app
wired to it in dev mode, dev tokens per role, and the (cached) real SmolLM2 tokenizer.

PostgreSQL is at HERO_TEST_PG_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test). When it
is unreachable the postgres cases skip, unless HERO_REQUIRE_SERVICES=1, where they fail.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

PG_URL = os.environ.get("HERO_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE = os.environ.get("HERO_REQUIRE_SERVICES") == "1"


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    """None when PostgreSQL is reachable, else why not."""
    try:
        eng = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with eng.connect() as c:
            c.execute(text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:  # any failure: not reachable
        return f"PostgreSQL at {PG_URL} unreachable: {exc.__class__.__name__}"


def _need_pg(reason: str | None) -> None:
    if reason is None:
        return
    if REQUIRE:
        pytest.fail(f"HERO_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def _pg_schema_url(reason: str | None) -> Iterator[str]:
    _need_pg(reason)
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


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path, pg_reason) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
    else:
        yield from _pg_schema_url(pg_reason)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


_TOKENIZERS: dict[str, object] = {}
_TOK_LOCK = threading.Lock()


def cached_tokenizer_loader(name: str):
    from verifier.engine.models import load_tokenizer

    with _TOK_LOCK:
        if name not in _TOKENIZERS:
            _TOKENIZERS[name] = load_tokenizer(name)
        return _TOKENIZERS[name]


def make_settings(home: Path, url: str, **kw):
    from verifier.settings import Settings

    base = dict(home=home, database_url=url, auto_migrate=True, dev_mode=True, jwks_file=None, jwks_url=None)
    base.update(kw)
    return Settings(**base)


class Service:
    """An app + client + token minting for one database."""

    def __init__(self, settings, client: TestClient) -> None:
        self.settings = settings
        self.client = client
        self.app = client.app
        self.ctx = client.app.state.ctx

    def token(self, role: str, sub: str = "alice", ttl: int = 600, **extra) -> str:
        from verifier.auth.devkeys import mint_token

        return mint_token(self.settings, role, sub, ttl, **extra)

    def auth(self, role: str, sub: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role, sub)}"}

    def init_keys(self) -> dict:
        r = self.client.post("/v1/keys/init", headers=self.auth("admin"))
        assert r.status_code == 201, r.text
        return r.json()


def service_factory(hero_home: Path, cls: type[Service] = Service) -> Iterator[Callable[..., Service]]:
    """Yields factory(url, **settings) -> cls; closes every client afterwards (shared with tests/workers)."""
    from verifier.app import create_app

    clients: list[TestClient] = []

    def factory(url: str, **kw) -> Service:
        settings = make_settings(hero_home, url, **kw)
        app = create_app(settings, tokenizer_loader=cached_tokenizer_loader)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return cls(settings, client)

    yield factory
    for c in clients:
        c.__exit__(None, None, None)


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
