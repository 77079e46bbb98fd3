"""deploy/monitoring: the alert rules and the Grafana dashboard only name metrics the service and the workers
serve (a renamed metric would leave an alert that never fires), both files parse, `promtool test rules` passes with
a case per alert where it fires and one where it stays silent, the Operator's PrometheusRule carries the same
rules, and the API's tokenless metrics port serves the queue and log gauges without the private counters."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from verifier.base import metrics
from verifier.jobs.observe import JobQueueCollector, LogCollector, api_public_registry

REPO = Path(__file__).resolve().parents[2]
MON = REPO / "deploy" / "monitoring"


def _served(sqlite_url: str, home: Path) -> set[str]:
    from prometheus_client import REGISTRY

    from tests.helpers.service import make_settings
    from verifier.process import open_database
    from verifier.provider import vllm_metrics

    vllm_metrics.metrics()  # the vLLM plugin's series, on vLLM's /metrics (registered where the plugin runs)
    names = {m.name for m in REGISTRY.collect()}  # the service's counters and histograms (verifier.base.metrics)
    assert "hero_jobs" in names and metrics.JOBS is not None
    db = open_database(make_settings(home, sqlite_url))  # the workers' queue gauges, read from a real database
    try:
        names |= {m.name for m in JobQueueCollector(db).collect()} | {m.name for m in LogCollector(db).collect()}
    finally:
        db.dispose()
    return names


def _named(text: str) -> set[str]:
    return {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in re.findall(r"\bhero_[a-z0-9_]+", text)}


def test_alerts_and_dashboard_name_served_metrics_only(sqlite_url, tmp_path):
    rules = yaml.safe_load((MON / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert len(exprs) >= 6 and all(r.get("labels", {}).get("severity") for g in rules["groups"] for r in g["rules"])
    dash = json.loads((MON / "grafana-dashboard.json").read_text())
    targets = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    served = _served(sqlite_url, tmp_path)
    assert {"hero_job_items_pending", "hero_job_oldest_pending_age_seconds"} <= served
    for expr in exprs + targets:
        unknown = _named(expr) - served
        assert not unknown, (expr, unknown)
    assert any("hero_job_items_pending" in e for e in exprs) and any("oldest_pending" in e for e in exprs)


def _alerts() -> list[str]:
    return [r["alert"] for g in yaml.safe_load((MON / "alerts.yaml").read_text())["groups"] for r in g["rules"]]


def test_promtool_rule_tests_pass_with_a_firing_and_a_silent_case_per_alert():
    if shutil.which("promtool") is None:
        from tests.helpers import postgres

        postgres.need("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
    r = subprocess.run(["promtool", "check", "rules", "alerts.yaml"], cwd=MON, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", "alerts.test.yaml"], cwd=MON, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    cases = [c for t in yaml.safe_load((MON / "alerts.test.yaml").read_text())["tests"] for c in t["alert_rule_test"]]
    for alert in _alerts():
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), f"{alert}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{alert}: no case where it stays silent"
    expected = {"HeroJobsPendingNoWorkers", "HeroAuditAppendFailing", "HeroLogCheckpointStale", "HeroJwksFailing",
                "HeroUnauthorizedSpike", "HeroRateLimitedSpike", "HeroVllmBundleExpiringSoon", "HeroVllmBundleExpired",
                "HeroVllmBundleRefreshFailing", "HeroVllmRowsRefused"}
    assert expected <= set(_alerts())


def test_the_prometheusrule_carries_the_same_rules():
    import sys

    r = subprocess.run([sys.executable, str(REPO / "scripts" / "render_prometheusrule.py"), "--check"])
    assert r.returncode == 0, "base/prometheusrule.yaml is stale: run scripts/render_prometheusrule.py"
    rule = yaml.safe_load((REPO / "deploy" / "kubernetes" / "base" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load((MON / "alerts.yaml").read_text())["groups"]


def test_the_api_metrics_port_serves_queue_and_log_gauges_and_no_private_counter(sqlite_url, tmp_path):
    """What HERO_METRICS_PORT serves (no token): the gauges that must outlive the workers, read from the database,
    and never verdict, disclosure or job counts."""
    from prometheus_client import generate_latest

    from tests.helpers.service import make_settings
    from verifier.process import open_database

    db = open_database(make_settings(tmp_path, sqlite_url))
    try:
        metrics.VERIFY_TEXTS.labels("watermarked").inc()
        metrics.JOBS.labels("submitted").inc()
        body = generate_latest(api_public_registry(db)).decode()  # type: ignore[arg-type]
    finally:
        db.dispose()
    for line in ("hero_job_items_pending 0.0", "hero_worker_db_up 1.0", "hero_log_events 0.0",
                 "hero_log_checkpoint_size 0.0", "hero_log_checkpoint_age_seconds 0.0"):
        assert line in body.splitlines(), line
    assert "hero_http_requests_total" in body or "hero_http_requests" in body
    for private in metrics.PRIVATE:
        assert f"{private}_total" not in body, private


def test_jwks_failures_are_counted_from_the_auth_log():
    import logging

    from prometheus_client import REGISTRY

    def count(source: str) -> float:
        return REGISTRY.get_sample_value("hero_jwks_failures_total", {"source": source}) or 0.0

    before = count("url"), count("file")
    log = logging.getLogger("hero.auth")
    log.warning("JWKS URL fetch failed", extra={"error": "ConnectError"})
    log.error("JWKS file is not valid JSON; keeping the previous key set", extra={"path": "/x"})
    log.error("token verification failed", extra={"error": "X"})  # not a key-source failure
    assert (count("url"), count("file")) == (before[0] + 1, before[1] + 1)
