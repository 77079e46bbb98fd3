"""`hero serve --workers 2`: one scrape of /metrics counts the requests served by both workers (prometheus_client's
multiprocess mode: counters summed over the workers' sample files), and label sets stay bounded."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.workers import FAST, ApiServer, free_port
from verifier.cli.serve_workers import dispatch_supported

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not dispatch_supported(), reason="this OS cannot pass descriptors")]


class WorkersServer(ApiServer):
    def __init__(self, env: dict[str, str], log: Path, port: int, workers: int) -> None:
        super(ApiServer, self).__init__([sys.executable, "-m", "verifier.cli", "serve", "--port", str(port),
                                         "--workers", str(workers)], env, log)
        self.url = f"http://127.0.0.1:{port}"


def _requests_by_route(samples) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        if s.name == "hero_http_requests_total":
            out[s.labels["route"]] = out.get(s.labels["route"], 0.0) + s.value
    return out


def _per_worker(home: Path) -> list[float]:
    """/healthz requests counted in each worker's own sample file."""
    out = []
    for f in sorted((home / "metrics").glob("counter_*.db")):
        samples = [s for m in MultiProcessCollector.merge([str(f)], accumulate=True) for s in m.samples]
        out.append(_requests_by_route(samples).get("/healthz", 0.0))
    return out


def test_one_scrape_counts_the_requests_of_both_workers(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, **FAST, "HERO_HOME": str(home), "HERO_DATABASE_URL": f"sqlite:///{tmp_path / 'm.db'}",
           "HERO_DEV_MODE": "1", "HERO_AUTO_MIGRATE": "1", "HERO_LOG_LEVEL": "WARNING"}
    for k in ("PROMETHEUS_MULTIPROC_DIR", "HERO_BROKER_URL", "HERO_METRICS_PORT"):
        env.pop(k, None)
    srv = WorkersServer(env, tmp_path / "serve.log", free_port(), 2)
    try:
        srv.wait_ready()
        sent, deadline = 0, time.monotonic() + 120
        # A new connection each: the supervisor deals them to the ready workers (the second may still be loading).
        while len([v for v in _per_worker(home) if v > 0]) < 2 or sent < 40:
            assert time.monotonic() < deadline, f"one worker served everything: {_per_worker(home)}"
            for _ in range(10):
                assert httpx.get(f"{srv.url}/healthz", timeout=10).status_code == 200
            sent += 10
        for i in range(sent):  # as many distinct unknown paths
            assert httpx.get(f"{srv.url}/no/such/path/{i}", timeout=10).status_code == 404
        per_worker = _per_worker(home)
        scraped = []
        for _ in range(4):  # whichever worker answers the scrape, it reports both
            text = httpx.get(f"{srv.url}/metrics", timeout=10).text
            scraped.append(_requests_by_route(s for f in text_string_to_metric_families(text) for s in f.samples))
    finally:
        srv.stop()
    assert len(per_worker) == 2 and all(v > 0 for v in per_worker) and sum(per_worker) == sent, per_worker
    for by_route in scraped:
        assert by_route["/healthz"] == sent and by_route["unmatched"] == sent  # counters summed over both
        assert set(by_route) <= {"/healthz", "/readyz", "/metrics", "unmatched"}  # many paths, one label value
