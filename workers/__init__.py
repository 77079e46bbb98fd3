"""Celery workers for decode jobs (`hero worker`). The task body is `verifier.jobs.drain.drain`."""
