"""`hero worker`: a Celery decode worker (needs HERO_BROKER_URL and the service database)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("worker", help="start a Celery decode worker (HERO_BROKER_URL, HERO_DATABASE_URL)")
    w.add_argument("--queues", default="gpu,celery", help="queues to consume")
    w.add_argument("--concurrency", type=int, default=1, help="worker processes (1: one per GPU)")
    w.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"], help="Celery pool")
    w.add_argument("--loglevel", default=None, help="default HERO_LOG_LEVEL")
    w.add_argument("--hostname", default=None, help="Celery node name (default hero@%%h)")
    w.set_defaults(handler=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> None:
    import workers  # noqa: F401  (first: the metrics sample directory, before prometheus_client is imported)
    from verifier.base.logs import configure_logging
    from verifier.base.settings import get_settings
    from verifier.keys.bootstrap import require_secrets

    settings = get_settings()  # the same object workers.app builds its Celery app from
    if not settings.broker_url:
        raise RuntimeError("HERO_BROKER_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    require_secrets(settings, log_key=False)  # workers unwrap job keys; they sign no checkpoints
    configure_logging(settings.log_level)
    from workers.app import app

    argv = [
        "worker", "-Q", args.queues, "-c", str(args.concurrency), "--pool", args.pool,
        "--loglevel", args.loglevel or settings.log_level, "-n", args.hostname or "hero@%h",
        "--without-gossip", "--without-mingle",
    ]
    app.worker_main(argv)
