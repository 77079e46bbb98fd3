"""Entry point of a Celery decode worker: `celery -A workers.app worker -Q gpu,celery` (or `hero worker`).

Settings are read once, here; the app comes from `verifier.jobs.queue.make_celery`.
"""

from __future__ import annotations

from verifier.base import tracing
from verifier.base.settings import get_settings
from verifier.jobs.queue import make_celery
from verifier.keys.bootstrap import require_secrets

settings = get_settings()
require_secrets(settings, log_key=False)  # outside dev mode: never a KEK of this worker's own
tracing.configure(settings, "hero-worker")  # a drain's spans continue the trace of the POST that queued it
app = make_celery(settings, include=["workers.tasks"])
