"""The Celery app: Redis broker, JSON only, late acks, prefetch 1, the `gpu` queue.

`celery -A workers.app worker -Q gpu,celery` (or `hero worker`) starts a worker. The API builds its own
instance with `make_celery(settings)` to publish `{"job_id": ...}` messages.
"""

from __future__ import annotations

from celery import Celery

from verifier.jobs.dispatch import DRAIN_TASK, QUEUE
from verifier.settings import Settings


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or Settings()
    app = Celery("hero", include=["workers.tasks"])
    app.conf.update(
        broker_url=settings.broker_url or "redis://127.0.0.1:6379/0",
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        broker_transport_options={"visibility_timeout": settings.broker_visibility_timeout},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=QUEUE,
        task_routes={DRAIN_TASK: {"queue": QUEUE}},
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app


app = make_celery()
