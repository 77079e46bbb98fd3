"""Job fixtures: a private PostgreSQL schema, a private redis-server on a free port (so it can be stopped
and restarted without touching the shared Redis), real Celery worker and API server subprocesses.

Missing PostgreSQL or redis-server: skip, or fail with HERO_REQUIRE_SERVICES=1 (as in CI).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import postgres
from tests.helpers.service import service_factory
from tests.helpers.workers import FAST, ApiServer, JobService, RedisServer, Worker, free_port


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        postgres.need("redis-server is not installed")
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _admin_without_quota(tmp_path, monkeypatch) -> None:
    """Job tests submit thousands of texts as admin and restart Redis (the quota store) mid-job: they run with the
    shipped role policy except the admin's text quota (what they test is the job machinery, not the quota)."""
    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "policies" / "roles.yaml").read_text())
    data["roles"]["admin"].pop("limits", None)
    path = tmp_path / "roles-admin-unlimited.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("HERO_ROLES_FILE", str(path))


@pytest.fixture
def make_service(hero_home) -> Iterator[Callable[..., JobService]]:
    yield from service_factory(hero_home, JobService)


def _env(hero_home, db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FAST)
    env.update(HERO_HOME=str(hero_home), HERO_DATABASE_URL=db_url, HERO_TEST_HOOKS="1", HERO_LOG_LEVEL="INFO")
    env.update(extra)
    return env


@pytest.fixture
def start_worker(tmp_path, hero_home) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(db_url: str, broker_url: str, **extra: str) -> Worker:
        w = Worker(_env(hero_home, db_url, HERO_BROKER_URL=broker_url, **extra),
                   tmp_path / f"worker{len(workers)}.log", f"w{len(workers)}")
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.stop()


@pytest.fixture
def start_api(tmp_path, hero_home) -> Iterator[Callable[..., ApiServer]]:
    """`hero serve` subprocesses on the given database, in dev mode, draining jobs in process."""
    servers: list[ApiServer] = []

    def start(db_url: str, **extra: str) -> ApiServer:
        env = _env(hero_home, db_url, HERO_DEV_MODE="1", HERO_AUTO_MIGRATE="1", **extra)
        env.pop("HERO_BROKER_URL", None)
        srv = ApiServer(env, tmp_path / f"api{len(servers)}.log", free_port())
        servers.append(srv)
        srv.wait_ready()
        return srv

    yield start
    for s in servers:
        s.stop()
