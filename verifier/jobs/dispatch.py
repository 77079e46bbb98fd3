"""Who runs a job's drains: this process (no broker configured) or Celery workers (HERO_BROKER_URL).

Both call `verifier.jobs.drain.drain`; the job state lives in the database either way, so a lost
message (broker restart, crashed publisher) only delays a job: workers re-enqueue stale jobs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from verifier.jobs.drain import DrainContext, drain
from verifier.settings import Settings

log = logging.getLogger("hero.jobs")

DRAIN_TASK = "hero.drain_job"
QUEUE = "gpu"


class InProcessDispatcher:
    backend = "inprocess"

    def __init__(self, make_context: Callable[[], DrainContext]) -> None:
        self._make = make_context
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hero-job")
        self._closed = threading.Event()

    def submit(self, job_id: str) -> None:
        self._pool.submit(self._run, job_id)

    def _run(self, job_id: str) -> None:
        dc = self._make()
        for _ in range(1000):
            if self._closed.is_set():
                return
            try:
                out = drain(dc, job_id)
            except Exception as exc:  # the job stays in the DB; a later submit resumes it
                log.error("job drain failed", extra={"job_id": job_id, "error": exc.__class__.__name__})
                return
            if out.wait is None:
                return
            time.sleep(min(out.wait + 0.05, 5.0))

    def ping(self) -> None:
        return None

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


class CeleryDispatcher:
    backend = "celery"

    def __init__(self, settings: Settings) -> None:
        from workers.app import make_celery

        assert settings.broker_url
        self.url = settings.broker_url
        self.app = make_celery(settings)

    def submit(self, job_id: str) -> None:
        # The message is {"job_id": ...} only: no text, no key material.
        self.app.send_task(DRAIN_TASK, kwargs={"job_id": job_id}, queue=QUEUE, retry=False)

    def ping(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=1.0, socket_timeout=1.0)
        try:
            client.ping()
        finally:
            client.close()

    def close(self) -> None:
        pass
