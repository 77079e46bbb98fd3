"""The Celery side of the durable job queue: task and queue names, and the app factory.

Redis broker, or Redis behind Sentinel (`sentinel://host:26379/0;sentinel://host2:26379/0` with
HERO_BROKER_TRANSPORT_OPTIONS `{"master_name": ...}`: kombu asks the sentinels for the master and follows a
failover); any Celery broker works (e.g. `sqla+sqlite:///...` where no Redis runs, as on a bare GPU machine).
JSON only, late acks, prefetch 1, the `gpu` queue. The API process builds an app to
publish `{"job_id": ...}` messages; `workers/app.py` builds the one the worker processes run, with the
task module included. Messages never carry texts or key material.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from verifier.base.settings import Settings

DRAIN_TASK = "hero.drain_job"
QUEUE = "gpu"


def make_celery(settings: Settings, include: Sequence[str] = ()) -> Celery:
    app = Celery("hero", include=list(include))
    url = settings.broker_url or "redis://127.0.0.1:6379/0"
    redis = url.split("://", 1)[0] in ("redis", "rediss", "sentinel")
    app.conf.update(
        broker_url=url,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        # Redis redelivers an unacked message after this long; other transports take no such option (SQLAlchemy's
        # would hand it to create_engine). HERO_BROKER_TRANSPORT_OPTIONS is merged over it (Sentinel's master_name).
        broker_transport_options={**({"visibility_timeout": settings.broker_visibility_timeout} if redis else {}),
                                  **settings.broker_transport_options},
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


def send_drain(app: Celery, job_id: str, countdown: float | None = None, parts: int = 1) -> None:
    """Publish `parts` drain messages for the job: {"job_id": ...} only. Each message's drain claims batches
    under SKIP LOCKED until none is left, so `parts` free workers share one job; the drains are idempotent (an
    item is stored and audited once, by the claim that still holds it)."""
    for _ in range(max(1, parts)):
        app.send_task(DRAIN_TASK, kwargs={"job_id": job_id}, queue=QUEUE, retry=False, countdown=countdown)
