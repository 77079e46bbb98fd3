"""Job test helpers: a private redis-server, real Celery worker and API server subprocesses, job
client helpers, and cheap watermarked texts (synthetic LM + the SmolLM2 tokenizer's decode)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.service import Service, cached_tokenizer_loader
from tests.helpers.synthetic import generate

REPO = Path(__file__).resolve().parents[2]

# Short leases and sweep intervals so crash recovery shows within seconds, yet long enough that a live worker's
# batch (a test delay of up to 1.5 s plus decoding) never outlives its lease on a loaded 2-core machine: an
# expired live claim is only extra work (completion is idempotent) but would change the attempt counts tests
# assert (the Celery tests failed under load with a 3 s lease).
FAST = {
    "HERO_JOB_LEASE_SECONDS": "20",
    "HERO_JOB_STALE_SECONDS": "10",
    "HERO_JOB_RECOVER_INTERVAL_SECONDS": "1",
    "HERO_JOB_BATCH_SIZE": "16",
}


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

        deadline = time.time() + 120  # polled: a bound for a loaded machine
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


class JobService(Service):
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

    def wait_done(self, job_id: str, timeout: float = 600, role: str = "admin", sub: str | None = None) -> dict:
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
            out.extend({k: v for k, v in res.items() if k != "receipt"} for res in r.json()["results"])
        return out  # as a job stores them (a job's receipt is that of each read, not of each text)


class Process:
    """A service subprocess whose output goes to a log file; SIGKILL-able like a crash."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.fh = log.open("ab")
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.fh, stderr=subprocess.STDOUT)

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


class Worker(Process):
    """`celery -A workers.app worker` as a real subprocess."""

    def __init__(self, env: dict[str, str], log: Path, name: str) -> None:
        super().__init__(
            [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", "gpu,celery", "-c", "1",
             "--pool", "solo", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--loglevel", "INFO"],
            env, log,
        )


class ApiServer(Process):
    """`hero serve` (uvicorn, in-process jobs when no broker is set) as a real subprocess."""

    def __init__(self, env: dict[str, str], log: Path, port: int) -> None:
        super().__init__([sys.executable, "-m", "verifier.cli", "serve", "--port", str(port)], env, log)
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout: float = 600) -> None:
        import httpx

        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"hero serve not ready after {timeout}s: {self.log.read_text()[-2000:]}")


def make_texts(svc: Service, n: int, steps: int = 48, seed: int = 0) -> list[str]:
    """n watermarked texts from the synthetic LM under the service's active keys (fast, no LM)."""
    profile = svc.ctx.profile
    keyset = svc.ctx.store.active_keyset(profile)
    fields = [f for lv in profile.levels for f in lv.fields]
    payloads = [{f.name: (i * 7 + k) % (1 << f.bits) for k, f in enumerate(fields)} for i in range(n)]
    ids = generate(profile, keyset, payloads, steps, seed=seed)
    tok = cached_tokenizer_loader(profile.tokenizer)
    texts = [tok.decode(row.tolist()) for row in ids]
    return [t if t.strip() else "x" + t for t in texts]


def job_doc(db, job_id: str) -> dict:
    """A job's status document and stored results, read directly (no reader, no `jobs.read` audit event)."""
    import json

    from verifier.jobs import repository as repo
    from verifier.jobs import service as jobs
    from verifier.jobs.models import JobRow

    with db.session() as s:
        job = s.get(JobRow, job_id)
        results = [json.loads(r) for r in repo.results_in_order(s, job_id)] if job.status == "done" else None
        return {**jobs.status_doc(job), "results": results}
