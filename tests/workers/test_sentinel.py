"""The Celery broker on Redis Sentinel (HERO_BROKER_URL=sentinel://..., HERO_BROKER_TRANSPORT_OPTIONS JSON), against
real processes: a master, its replica and a sentinel (`redis-server --sentinel`). The API publishes through the
sentinel, a worker drains through it, and a 3,000-text job whose master is SIGKILLed mid-drain (the sentinel
promotes the replica) completes with every item stored and audited once."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.helpers import postgres
from tests.helpers.workers import free_port, make_texts
from verifier.audit.models import AuditEventRow
from verifier.base.settings import Settings
from verifier.jobs.models import JobItemRow
from verifier.jobs.queue import make_celery

MASTER = "hero-master"
OPTIONS = json.dumps({"master_name": MASTER})


def test_a_sentinel_url_takes_its_master_name_from_the_transport_options(tmp_path):
    url = "sentinel://127.0.0.1:26379/0;sentinel://127.0.0.2:26379/0"
    app = make_celery(Settings(home=tmp_path, broker_url=url, broker_transport_options={"master_name": MASTER}))
    assert app.conf.broker_transport_options == {"visibility_timeout": 3600, "master_name": MASTER}
    with pytest.raises(ValueError, match="HERO_BROKER_TRANSPORT_OPTIONS"):
        Settings(home=tmp_path, broker_url=url)  # kombu's own error only came at the first publish


def test_the_transport_options_are_read_from_the_environment_as_json(tmp_path, monkeypatch):
    monkeypatch.setenv("HERO_BROKER_URL", "sentinel://127.0.0.1:26379/0")
    monkeypatch.setenv("HERO_BROKER_TRANSPORT_OPTIONS", '{"master_name": "m1", "sentinel_kwargs": {"password": "x"}}')
    app = make_celery(Settings(home=tmp_path))
    assert app.conf.broker_transport_options["master_name"] == "m1"
    assert app.conf.broker_transport_options["sentinel_kwargs"] == {"password": "x"}


class Sentinel:
    """A Redis master, one replica and one sentinel (quorum 1, a second to notice a dead master)."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.ports = {"master": free_port(), "replica": free_port(), "sentinel": free_port()}
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.ports['sentinel']}/0"

    def _redis(self, name: str, *args: str) -> None:
        d = self.dir / name
        d.mkdir(exist_ok=True)
        self.procs[name] = subprocess.Popen(
            ["redis-server", "--port", str(self.ports[name]), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(d), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait(self.ports[name])

    def start(self) -> None:
        self._redis("master")
        self._redis("replica", "--replicaof", "127.0.0.1", str(self.ports["master"]))
        conf = self.dir / "sentinel.conf"
        conf.write_text(f"port {self.ports['sentinel']}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {self.ports['master']} 1\n"
                        f"sentinel down-after-milliseconds {MASTER} 1000\n"
                        f"sentinel failover-timeout {MASTER} 10000\n")
        self.procs["sentinel"] = subprocess.Popen(["redis-server", str(conf), "--sentinel"],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait(self.ports["sentinel"])
        deadline = time.time() + 60  # the replica in sync and known to the sentinel
        while self.master_port() != self.ports["master"] or self._client("replica").info("replication")[
                "master_link_status"] != "up":
            assert time.time() < deadline, "sentinel set did not come up"
            time.sleep(0.1)

    def _client(self, name: str):
        import redis

        return redis.Redis(port=self.ports[name], socket_connect_timeout=1, socket_timeout=2)

    def _wait(self, port: int) -> None:
        import redis

        deadline = time.time() + 60
        while True:
            try:
                redis.Redis(port=port, socket_connect_timeout=0.5).ping()
                return
            except Exception:
                assert time.time() < deadline, f"redis on {port} did not start"
                time.sleep(0.05)

    def master_port(self) -> int | None:
        try:
            got = self._client("sentinel").execute_command("SENTINEL", "get-master-addr-by-name", MASTER)
        except Exception:
            return None
        return int(got[1]) if got else None

    def kill_master(self) -> None:
        self.procs["master"].send_signal(signal.SIGKILL)
        self.procs["master"].wait(10)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(10)


@pytest.fixture
def sentinel(tmp_path):
    if shutil.which("redis-server") is None:
        postgres.need("redis-server is not installed")
    s = Sentinel(tmp_path / "redis")
    s.dir.mkdir()
    s.start()
    yield s
    s.stop()


@pytest.mark.slow  # real redis-server, sentinel and Celery worker subprocesses; a 3,000-text job
def test_a_3000_text_job_survives_a_broker_failover_with_every_item_stored_once(
    pg_url, sentinel, make_service, start_worker
):
    svc = make_service(pg_url, broker_url=sentinel.url, broker_transport_options={"master_name": MASTER},
                       job_batch_size=64, job_fanout_max=4)
    svc.init_keys()
    texts = make_texts(svc, 150, steps=40) * 20  # 3,000 items (distinct indexes; texts repeat)
    start_worker(pg_url, sentinel.url, HERO_BROKER_TRANSPORT_OPTIONS=OPTIONS, HERO_JOB_BATCH_SIZE="64",
                 HERO_WORKER_TEST_DELAY_S="0.3")
    jid = svc.submit(texts, "admin")
    assert svc.client.get("/readyz").status_code == 200  # the broker ping goes through the sentinel
    deadline = time.time() + 900  # polled: a bound for a loaded machine, not a speed target
    while svc.job(jid)["progress"]["done"] < 600:  # well into the drain
        assert time.time() < deadline, f"no progress: {svc.job(jid)['progress']}"
        time.sleep(0.1)
    old = sentinel.master_port()
    sentinel.kill_master()
    while sentinel.master_port() in (old, None):  # the sentinel promotes the replica
        assert time.time() < deadline, "no failover"
        time.sleep(0.2)
    assert sentinel.master_port() == sentinel.ports["replica"]
    assert svc.job(jid)["status"] != "done"  # the failover happened mid-job

    doc = svc.wait_done(jid, timeout=900)
    assert doc["status"] == "done" and len(doc["results"]) == 3000
    with svc.ctx.db.session() as s:
        items = s.execute(select(JobItemRow.status).where(JobItemRow.job_id == jid)).scalars().all()
        audited = list(s.scalars(select(AuditEventRow.detail).where(AuditEventRow.detail.like(f"job={jid} item=%"))))
        n_items = s.scalar(select(func.count()).select_from(JobItemRow).where(JobItemRow.job_id == jid))
    assert n_items == 3000 and set(items) == {"done"}
    assert len(audited) == 3000 and len(set(audited)) == 3000  # every item stored and audited once
    # jobs published after the failover go to the promoted master, through the same sentinel URL
    late = svc.submit(texts[:20], "admin")
    assert svc.wait_done(late, timeout=600)["status"] == "done"
