"""Worker fixtures: a private PostgreSQL schema, a private redis-server on a free port (so it can be
stopped and restarted without touching the shared Redis), real Celery worker subprocesses, and cheap
watermarked texts (synthetic LM + the SmolLM2 tokenizer's decode).

Missing PostgreSQL or redis-server: skip, or fail with HERO_REQUIRE_SERVICES=1 (as in CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.service.conftest import Service as ServiceBase
from tests.service.conftest import _pg_schema_url, cached_tokenizer_loader, service_factory

REPO = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("HERO_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE = os.environ.get("HERO_REQUIRE_SERVICES") == "1"

# Small leases and sweep intervals so crash recovery shows within seconds.
FAST = {
    "HERO_JOB_LEASE_SECONDS": "3",
    "HERO_JOB_STALE_SECONDS": "2",
    "HERO_JOB_RECOVER_INTERVAL_SECONDS": "1",
    "HERO_JOB_BATCH_SIZE": "16",
}


def _need(reason: str | None) -> None:
    if reason is None:
        return
    if REQUIRE:
        pytest.fail(f"HERO_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    try:
        eng = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with eng.connect() as c:
            c.execute(text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:
        return f"PostgreSQL at {PG_URL} unreachable: {exc.__class__.__name__}"


@pytest.fixture
def pg_url(pg_reason) -> Iterator[str]:
    yield from _pg_schema(pg_reason)


def _pg_schema(pg_reason: str | None) -> Iterator[str]:
    """A fresh PostgreSQL schema per test: the same helper as the service tests."""
    yield from _pg_schema_url(pg_reason)


@pytest.fixture(params=["sqlite", "postgres"])
def any_db_url(request, tmp_path, pg_reason) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        yield from _pg_schema(pg_reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Our own redis-server (no persistence): stopping it loses queued messages, like a real restart."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.5).ping()
                return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def client(self):
        import redis

        return redis.Redis(port=self.port, socket_connect_timeout=1)


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        _need("redis-server is not installed")
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


class Service(ServiceBase):
    """The service tests' app + client, plus job helpers; tokens default to subject `<role>-1`."""

    def auth(self, role: str, sub: str | None = None) -> dict[str, str]:
        return super().auth(role, sub or f"{role}-1")

    def submit(self, texts: list[str], role: str, sub: str | None = None) -> str:
        r = self.client.post("/v1/jobs", headers=self.auth(role, sub), json={"texts": texts})
        assert r.status_code == 202, r.text
        return r.json()["job_id"]

    def job(self, job_id: str, role: str = "admin", sub: str | None = None) -> dict:
        r = self.client.get(f"/v1/jobs/{job_id}", headers=self.auth(role, sub))
        assert r.status_code == 200, r.text
        return r.json()

    def wait_done(self, job_id: str, timeout: float = 60, role: str = "admin", sub: str | None = None) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            doc = self.job(job_id, role, sub)
            if doc["status"] in ("done", "failed"):
                assert doc["status"] == "done", doc
                return doc
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not done after {timeout}s: {self.job(job_id, role, sub)}")

    def verify_inline(self, texts: list[str], role: str) -> list[dict]:
        """The same texts through POST /v1/verify (in-process runner), 32 per request."""
        out = []
        for i in range(0, len(texts), 32):
            r = self.client.post("/v1/verify", headers=self.auth(role), json={"texts": texts[i : i + 32]})
            assert r.status_code == 200, r.text
            out.extend(r.json()["results"])
        return out


@pytest.fixture
def make_service(hero_home) -> Iterator[Callable[..., Service]]:
    yield from service_factory(hero_home, Service)


class Worker:
    """`celery -A workers.app worker` as a real subprocess."""

    def __init__(self, env: dict[str, str], log: Path, name: str) -> None:
        self.log = log
        self.fh = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", "gpu,celery", "-c", "1",
             "--pool", "solo", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--loglevel", "INFO"],
            cwd=REPO, env=env, stdout=self.fh, stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.fh.close()


@pytest.fixture
def start_worker(tmp_path, hero_home) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(db_url: str, broker_url: str, **extra: str) -> Worker:
        env = dict(os.environ)
        env.update(FAST)
        env.update(
            HERO_HOME=str(hero_home), HERO_DATABASE_URL=db_url, HERO_BROKER_URL=broker_url, HERO_TEST_HOOKS="1",
            HERO_LOG_LEVEL="INFO",
        )
        env.update(extra)
        w = Worker(env, tmp_path / f"worker{len(workers)}.log", f"w{len(workers)}")
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.stop()


def make_texts(svc: Service, n: int, steps: int = 48, seed: int = 0) -> list[str]:
    """n watermarked texts from the synthetic LM under the service's active keys (fast, no LM)."""
    sys.path.insert(0, str(REPO / "tests"))
    from synthetic import generate

    profile = svc.ctx.profile
    keyset = svc.ctx.store.active_keyset(profile)
    fields = [f for lv in profile.levels for f in lv.fields]
    payloads = [{f.name: (i * 7 + k) % (1 << f.bits) for k, f in enumerate(fields)} for i in range(n)]
    ids = generate(profile, keyset, payloads, steps, seed=seed)
    tok = cached_tokenizer_loader(profile.tokenizer)
    texts = [tok.decode(row.tolist()) for row in ids]
    return [t if t.strip() else "x" + t for t in texts]


@pytest.fixture
def sqlite_url_jobs(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"
