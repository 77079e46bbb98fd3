"""What a Celery worker shows Prometheus: its counters (every prefork child's, merged) and the queue's state; and
what the API's tokenless metrics port (HERO_METRICS_PORT) adds to its public view: the same queue gauges (so they
outlive the workers: "pending, no workers" can fire, and KEDA can scale workers to zero) and the transparency log's
(`LogCollector`: events, the newest stored checkpoint's size and age).

`hero worker` (any `celery -A workers.app worker`) with HERO_WORKER_METRICS_PORT serves /metrics from its main
process. Counters and histograms are multiprocess-safe: `workers/__init__.py` points PROMETHEUS_MULTIPROC_DIR at
a private directory of this worker before prometheus_client is imported, so the children write their samples
there and a scrape merges them. The queue gauges are read from the database at scrape time, the same numbers
on every worker (the work of every job, not of the messages in the broker): what an autoscaler (KEDA) and
the alert rules in deploy/monitoring/ read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, multiprocess, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from verifier.base import metrics
from verifier.base.db import Database
from verifier.jobs.models import JobRow
from verifier.jobs.repository import UNFINISHED

log = logging.getLogger("hero.worker")

PENDING = "hero_job_items_pending"
OLDEST = "hero_job_oldest_pending_age_seconds"


class JobQueueCollector(Collector):
    """Gauges over unfinished (queued or running) jobs, one query per scrape: items not yet stored, the age of
    the oldest such job, how many there are; and whether the database answered (`hero_worker_db_up`)."""

    def __init__(self, db: Database, clock=time.time) -> None:
        self.db = db
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("hero_worker_db_up", "1 when the last scrape could read the job tables")
        try:
            with self.db.snapshot() as s:
                jobs, left, oldest = s.execute(
                    select(func.count(), func.coalesce(func.sum(JobRow.total - JobRow.done), 0),
                           func.min(JobRow.created_at)).where(JobRow.status.in_(UNFINISHED))
                ).one()
        except Exception as exc:  # the database is down: say so, keep serving the counters
            log.warning("job gauges unavailable", extra={"error": exc.__class__.__name__})
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily(PENDING, "Items of unfinished jobs not yet stored (pending or claimed)",
                                value=float(left))
        yield GaugeMetricFamily(OLDEST, "Age of the oldest unfinished job (0 when none)",
                                value=max(0.0, self.clock() - float(oldest)) if oldest is not None else 0.0)
        yield GaugeMetricFamily("hero_jobs_unfinished", "Jobs queued or running", value=float(jobs))


EVENTS = "hero_log_events"
CHECKPOINT_SIZE = "hero_log_checkpoint_size"
CHECKPOINT_AGE = "hero_log_checkpoint_age_seconds"


class LogCollector(Collector):
    """The audit log's size and its newest stored (published) checkpoint: events the checkpoints do not cover yet
    are `hero_log_events - hero_log_checkpoint_size`; an alert fires when they keep growing while the newest
    checkpoint ages (deploy/monitoring/alerts.yaml, HeroLogCheckpointStale). Nothing when the database is down
    (JobQueueCollector's `hero_worker_db_up` says so)."""

    def __init__(self, db: Database, clock=time.time) -> None:
        self.db = db
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        from verifier.audit.models import AuditEventRow, CheckpointRow

        try:
            with self.db.snapshot() as s:
                events = s.scalar(select(func.coalesce(func.max(AuditEventRow.idx), 0)))
                latest = s.execute(select(CheckpointRow.size, CheckpointRow.created_at)
                                   .order_by(CheckpointRow.size.desc()).limit(1)).first()
        except Exception as exc:
            log.warning("log gauges unavailable", extra={"error": exc.__class__.__name__})
            return
        size, created = (int(latest[0]), float(latest[1])) if latest else (0, None)
        yield GaugeMetricFamily(EVENTS, "Events in the audit log (the transparency log's tree size)",
                                value=float(events or 0))
        yield GaugeMetricFamily(CHECKPOINT_SIZE, "Tree size of the newest stored signed checkpoint",
                                value=float(size))
        yield GaugeMetricFamily(CHECKPOINT_AGE, "Age of the newest stored signed checkpoint (0 when none)",
                                value=max(0.0, self.clock() - created) if created is not None else 0.0)


class _Joined:
    """Several collectors read as one registry (what prometheus_client's HTTP server and generate_latest need)."""

    def __init__(self, *parts) -> None:
        self.parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self.parts:
            yield from part.collect()


def api_public_registry(db: Database):
    """The API's tokenless metrics port: the public view of its counters plus the queue and log gauges."""
    return _Joined(metrics.public_registry(), JobQueueCollector(db), LogCollector(db))


# What a worker's port never shows: verdict counts and disclosures per role and level (what the service finds and
# who asks). The job counters (hero_jobs_total, hero_job_texts_total: submitted / decoded / done / failed) count
# work, not findings, and only the workers count decoded texts, so they are served here (the API's public view
# leaves them out too: verifier.base.metrics.PRIVATE).
WORKER_PRIVATE = frozenset({"hero_verify_texts", "hero_disclosures"})


class _Public:
    """A registry's families without WORKER_PRIVATE ones."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        return (f for f in self.registry.collect() if f.name not in WORKER_PRIVATE)


def worker_registry(db: Database) -> CollectorRegistry:
    """This worker's counters (every child's, in multiprocess mode) plus the queue gauges."""
    registry = CollectorRegistry()
    if os.environ.get(metrics.MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY

        registry.register(_Forward(REGISTRY))
    registry.register(JobQueueCollector(db))
    return registry


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        return self.registry.collect()


def serve_worker_metrics(db: Database, port: int, host: str = "127.0.0.1") -> int:
    """Start /metrics on host:port (0: any free port) on a daemon thread; the port it listens on."""
    server, _thread = start_http_server(port, addr=host, registry=_Public(worker_registry(db)))  # type: ignore[arg-type]
    bound = int(server.server_address[1])
    log.info("worker metrics listening", extra={"host": host, "port": bound})
    return bound
