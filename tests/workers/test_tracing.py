"""OpenTelemetry: one decode job is one trace, from the POST through the Celery worker. The trace id travels in
the task message's headers (its body stays {"job_id"}), and every JSON log line carries its trace id: the
API's line for the POST and the worker's lines for the job's batches show the same one."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from tests.helpers.workers import Process, make_texts
from tests.workers.conftest import _env
from verifier.base.logs import JsonFormatter

pytest.importorskip("opentelemetry.sdk.trace")


def test_a_jobs_trace_id_is_in_the_api_and_the_worker_log_lines(pg_url, redis_server, make_service, hero_home,
                                                                  tmp_path):
    api_log = io.StringIO()
    handler = logging.StreamHandler(api_log)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    worker = None
    try:
        # the service first: it makes the deployment's secrets (`hero kek init`), which a worker outside dev mode
        # refuses to start without
        svc = make_service(pg_url, broker_url=redis_server.url, tracing=True)
        worker = Process([sys.executable, "-m", "verifier.cli", "worker", "--pool", "solo", "--hostname",
                          "trace@%h"], _env(hero_home, pg_url, HERO_BROKER_URL=redis_server.url, HERO_TRACING="1"),
                         tmp_path / "worker.log")
        svc.init_keys()
        texts = make_texts(svc, 5, steps=40)
        jid = svc.submit(texts, "admin")
        doc = svc.wait_done(jid, timeout=180)
        assert doc["status"] == "done"
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        if worker is not None:
            worker.stop()
    api_lines = [json.loads(ln) for ln in api_log.getvalue().splitlines() if ln.startswith("{")]
    posts = [ln for ln in api_lines if ln.get("path") == "/v1/jobs" and ln.get("method") == "POST"]
    assert len(posts) == 1 and len(posts[0].get("trace_id", "")) == 32, posts
    trace = posts[0]["trace_id"]
    worker_lines = [json.loads(ln) for ln in worker.log.read_text().splitlines() if ln.startswith("{")]
    mine = [ln for ln in worker_lines if ln.get("job_id") == jid]
    assert mine, worker.log.read_text()[-3000:]
    assert {ln.get("trace_id") for ln in mine} == {trace}
    # other requests have traces of their own
    others = {ln.get("trace_id") for ln in api_lines if ln.get("path") not in (None, "/v1/jobs")}
    assert trace not in others and None not in others
