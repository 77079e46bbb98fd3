"""Who runs a job's drains: this process (no broker configured) or Celery workers (HERO_BROKER_URL).

Both call `verifier.jobs.drain.drain`; the job state lives in the database either way, so a lost
message (broker restart, crashed publisher) or a dead API process only delays a job: Celery workers
re-enqueue stale jobs, and an API process draining in process resumes unfinished jobs when it starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

from verifier.base.db import Database
from verifier.base.settings import Settings
from verifier.jobs import service as jobs
from verifier.jobs.drain import DrainContext, drain

log = logging.getLogger("hero.jobs")


def fanout(items: int, batch_size: int, most: int) -> int:
    """How many drain messages a job of `items` texts becomes: one per batch, at most `most`."""
    return max(1, min(-(-items // max(1, batch_size)), most))


class Dispatcher(Protocol):
    backend: str

    def start(self) -> None: ...

    def submit(self, job_id: str, parts: int = 1) -> None: ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


class InProcessDispatcher:
    backend = "inprocess"

    def __init__(self, db: Database, make_context: Callable[[], DrainContext]) -> None:
        self._db = db
        self._make = make_context
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hero-job")
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._futures: list[Future] = []

    def start(self) -> None:
        """Resume the jobs a previous process left unfinished (claims it held expire with their lease)."""
        ids = jobs.unfinished_jobs(self._db)
        for job_id in ids:
            self.submit(job_id)
        if ids:
            log.info("resuming unfinished jobs", extra={"jobs": len(ids)})

    def submit(self, job_id: str, parts: int = 1) -> None:
        """`parts` is ignored: one thread drains (the drains of a job would only take turns here)."""
        fut = self._pool.submit(self._run, job_id)
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [fut]

    def _run(self, job_id: str) -> None:
        dc = self._make()
        dc.stop = self._closed
        for _ in range(1000):
            if self._closed.is_set():
                return
            try:
                out = drain(dc, job_id)
            except Exception as exc:  # the job stays in the DB; a later submit or start-up resumes it
                log.error("job drain failed", extra={"job_id": job_id, "error": exc.__class__.__name__})
                return
            if out.wait is None:
                return
            self._closed.wait(min(out.wait + 0.05, 5.0))

    def ping(self) -> None:
        return None

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop draining: queued jobs are cancelled (they resume at the next start), the running drain returns
        at its next batch boundary, and is waited for (bounded), so no drain writes to a database that is being
        shut down or dropped."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = [f for f in self._futures if not f.done()]
        wait(running, timeout=timeout_s)


class CeleryDispatcher:
    backend = "celery"

    def __init__(self, settings: Settings) -> None:
        from verifier.jobs.queue import make_celery

        assert settings.broker_url
        self.url = settings.broker_url
        self.app = make_celery(settings)

    def start(self) -> None:
        return None  # workers re-enqueue stale jobs (verifier.jobs.recovery, started by workers/tasks.py)

    def submit(self, job_id: str, parts: int = 1) -> None:
        """`parts` drain messages (`verifier.jobs.queue.fanout`): as many workers as there are drain the job."""
        from verifier.jobs.queue import send_drain

        send_drain(self.app, job_id, parts=parts)

    def ping(self) -> None:
        if self.url.split("://", 1)[0] not in ("redis", "rediss"):  # another Celery transport (e.g. sqla+...)
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=1.0)
            return
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=1.0, socket_timeout=1.0)
        try:
            client.ping()
        finally:
            client.close()

    def close(self) -> None:
        pass
