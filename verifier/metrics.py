"""Prometheus metrics (process-wide default registry), exposed on /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
