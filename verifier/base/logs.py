"""Structured (JSON-lines) logging. Only whitelisted `extra` fields are emitted; never key material."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from verifier.base.tracing import trace_id

SAFE_FIELDS = (
    "request_id", "method", "path", "status", "duration_ms", "subject", "role", "profile", "level",
    "version", "texts", "error", "events", "kek_id", "job_id", "items", "worker", "jobs",
    "problem",  # a JWKS key skipped and why (source, kid, reason; never key material)
    "provider_id", "bundle_id", "versions",  # a generation bundle issued / installed (version names only)
    "source",  # the profile a key move came from (hero keys move-profile; main logs it)
    "workers",  # server worker processes (hero serve)
    "op",  # a KEK provider call that failed (verifier.keys.kek_*): the operation, never its data
    "retired",  # how many KEK versions a rotation retired (a count)
    "host", "port",  # where a job worker's metrics server listens (verifier.jobs.observe)
    "decodes",  # how many decodes run past their deadline (/readyz answering 503)
    "issuer",  # the token issuer a provider registration names (an issuer URL, public)
    "reason",  # why an earlier profile was not tried in a decode (its load or tokenizer error; never key material)
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        tid = trace_id()
        if tid is not None:  # OpenTelemetry (verifier.base.tracing): this line's trace, API and worker alike
            out["trace_id"] = tid
        for k in SAFE_FIELDS:
            if hasattr(record, k):
                out[k] = getattr(record, k)
        if record.exc_info and record.exc_info[0] is not None:
            out["exc_type"] = record.exc_info[0].__name__  # type only: messages may quote inputs
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    logging.getLogger("uvicorn.access").setLevel("WARNING")  # our middleware logs requests
