"""Celery worker entry points (`hero worker`). The task body is `verifier.jobs.drain.drain`."""
