"""Celery worker entry points (`hero worker`). The task body is `verifier.jobs.drain.drain`.

With HERO_WORKER_METRICS_PORT set, this worker's prefork children share one private Prometheus sample
directory (multiprocess mode): it must be in the environment before prometheus_client is first imported,
which is why it is set here, the first module `celery -A workers.app` imports.
"""

from __future__ import annotations

import os


def _metrics_dir() -> None:
    if not os.environ.get("HERO_WORKER_METRICS_PORT") or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="hero-worker-metrics-")  # 0700, this worker's alone (children inherit it)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    owner = os.getpid()

    def _cleanup() -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_cleanup)


_metrics_dir()
