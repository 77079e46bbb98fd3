"""Prometheus metrics (process-wide default registry), exposed on /metrics.

Under `hero serve --workers N` every worker writes its samples to files in one directory (prometheus_client's
multiprocess mode, `PROMETHEUS_MULTIPROC_DIR`, set by the supervisor before the workers start), and a scrape
of any worker merges them: counters and histograms summed over the workers, dead ones included. Label sets
stay bounded (route templates, status codes, roles), as in one process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter("hero_http_requests_total", "HTTP requests", ["method", "route", "status"])
REQUEST_SECONDS = Histogram("hero_http_request_seconds", "HTTP request latency", ["method", "route"])
VERIFY_SECONDS = Histogram("hero_verify_seconds", "Time to decode one /v1/verify request")
VERIFY_TEXTS = Counter("hero_verify_texts_total", "Texts verified", ["outcome"])
DISCLOSURES = Counter("hero_disclosures_total", "Disclosures recorded in the audit log", ["role", "max_level"])
AUDIT_FAILURES = Counter("hero_audit_failures_total", "Requests refused because the audit append failed")
AUTH_FAILURES = Counter("hero_auth_failures_total", "Rejected requests", ["status"])
BODY_REJECTIONS = Counter(
    "hero_body_rejections_total", "Requests refused before their body was parsed", ["reason"]
)  # reason: unauthenticated | too_large | not_utf8
RATE_LIMITED = Counter("hero_rate_limited_total", "Requests refused by a rate limit or quota", ["role", "window"])
JOB_TEXTS = Counter(
    "hero_job_texts_total", "Texts of decode jobs", ["outcome"]
)  # outcome: submitted | decoded (stored and audited)
JOBS = Counter("hero_jobs_total", "Decode jobs", ["outcome"])  # outcome: submitted | done | failed
JWKS_FAILURES = Counter("hero_jwks_failures_total", "JWKS / OIDC key fetches and JWKS files that failed (the last "
                        "good key set stays in use)", ["source"])  # source: url (HERO_JWKS_URL, OIDC) | file


class _JwksFailures(logging.Handler):
    """Counts the key source's failure lines (verifier/auth/jwt.py logs each one on `hero.auth`): the metric
    without a hook in the auth code. "JWKS URL fetch failed" is a URL or OIDC discovery / jwks_uri fetch;
    "JWKS file ..." an unreadable, invalid or empty HERO_JWKS_FILE."""

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        if msg.startswith("JWKS URL fetch failed"):
            JWKS_FAILURES.labels("url").inc()
        elif msg.startswith("JWKS file"):
            JWKS_FAILURES.labels("file").inc()


logging.getLogger("hero.auth").addHandler(_JwksFailures(logging.WARNING))


def prepare_multiprocess(home: Path) -> Path:
    """The supervisor's part, before it starts the workers: an empty, private sample directory (an operator's
    `PROMETHEUS_MULTIPROC_DIR`, else $HERO_HOME/metrics), exported to the workers through the environment."""
    from verifier.base.secretfile import private_dir

    path = Path(os.environ.get(MULTIPROC_ENV) or home / "metrics")
    private_dir(path)
    for old in path.glob("*.db"):  # a previous run's samples would be added to this one's
        old.unlink()
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def scrape_registry() -> CollectorRegistry | None:
    """What a scrape reads: every worker's samples merged in multiprocess mode, else None (this process's)."""
    if not os.environ.get(MULTIPROC_ENV):
        return None
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


# Families a public exposition leaves out (every one with an `outcome` label): live verdict counts (watermarked /
# not-watermarked) and disclosures per role and level tell anyone who can scrape what the service finds, and who asks.
PRIVATE = frozenset({"hero_verify_texts", "hero_disclosures", "hero_job_texts", "hero_jobs"})


class PublicView:
    """A registry's families without PRIVATE ones (what `generate_latest` and prometheus' own server read)."""

    def __init__(self, registry) -> None:
        self.registry = registry

    def collect(self):
        return (f for f in self.registry.collect() if f.name not in PRIVATE)


def public_registry():
    """What an unauthenticated scrape reads (public /metrics, HERO_METRICS_PORT): PRIVATE families left out."""
    return PublicView(scrape_registry() or REGISTRY)


def exposition(public: bool = False) -> bytes:
    """The Prometheus text of this process (every worker's, merged); `public`: without PRIVATE families."""
    if public:
        return generate_latest(public_registry())
    registry = scrape_registry()
    return generate_latest(registry) if registry is not None else generate_latest()
