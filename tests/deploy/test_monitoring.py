"""deploy/monitoring: the alert rules and the Grafana dashboard only name metrics the service and the workers
serve (a renamed metric would leave an alert that never fires), and both files parse."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from verifier import metrics
from verifier.jobs.observe import JobQueueCollector

MON = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"


def _served(sqlite_url: str, home: Path) -> set[str]:
    from prometheus_client import REGISTRY

    from tests.helpers.service import make_settings
    from verifier.process import open_database

    names = {m.name for m in REGISTRY.collect()}  # the service's counters and histograms (verifier.metrics)
    assert "hero_jobs" in names and metrics.JOBS is not None
    db = open_database(make_settings(home, sqlite_url))  # the workers' queue gauges, read from a real database
    try:
        names |= {m.name for m in JobQueueCollector(db).collect()}
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
