"""Entry point of a Celery decode worker: `celery -A workers.app worker -Q gpu,celery` (or `hero worker`).

Settings are read once, here; the app comes from `verifier.jobs.queue.make_celery`.
"""

from __future__ import annotations

from verifier.jobs.queue import make_celery
from verifier.settings import get_settings

settings = get_settings()
app = make_celery(settings, include=["workers.tasks"])
