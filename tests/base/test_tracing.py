"""OpenTelemetry in the API process: a request is a FastAPI span with its SQL statements as children, and the
request's JSON log line carries that trace id; nothing is exported without an OTLP endpoint."""

from __future__ import annotations

import io
import json
import logging

import pytest

from verifier.base.logs import JsonFormatter

pytest.importorskip("opentelemetry.sdk.trace")


def test_request_span_sql_children_and_the_log_lines_trace_id(make_service, sqlite_url, caplog):
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    lite = make_service(sqlite_url, tracing=True)
    exporter = InMemorySpanExporter()
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("hero.http").addHandler(handler)
    caplog.set_level(logging.INFO, logger="hero.http")
    try:
        r = lite.client.get("/v1/keys", headers=lite.auth("admin"))
    finally:
        logging.getLogger("hero.http").removeHandler(handler)
    assert r.status_code == 200
    spans = exporter.get_finished_spans()
    server = [s for s in spans if s.kind == trace.SpanKind.SERVER and s.attributes.get("http.route") == "/v1/keys"]
    assert len(server) == 1
    tid = server[0].context.trace_id
    sql = [s for s in spans if s.context.trace_id == tid and "db.statement" in s.attributes]
    assert sql and any("hero_key" in s.attributes["db.statement"] for s in sql)  # the key listing's query
    line = next(json.loads(ln) for ln in buf.getvalue().splitlines() if '"/v1/keys"' in ln)
    assert line["trace_id"] == format(tid, "032x")
    lite.client.get("/healthz")  # probes are not traced
    assert not [s for s in exporter.get_finished_spans() if s.attributes.get("http.route") == "/healthz"]
