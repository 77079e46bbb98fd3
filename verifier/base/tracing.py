"""OpenTelemetry traces (the optional `otel` extra): spans for HTTP requests (FastAPI), SQL statements
(SQLAlchemy) and Celery tasks, a job's trace carried from the POST to the worker in the task message's headers
(never in its body), and the trace id in every JSON log line (`verifier.base.logs`).

On when the extra is installed and `HERO_TRACING` is true (off by default: +6 ms of a ~72 ms in-process
single-text /v1/verify in a first, noisy measurement); spans leave the process only when an
OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, with the
SDK's other `OTEL_*` variables), else they only give log lines their ids. Span attributes are the
instrumentations' own (method, route template, status, SQL statement text with bound values left out, task
name and id): no request body, text or key material is recorded.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref

log = logging.getLogger("hero.tracing")

_lock = threading.Lock()
_configured = False
_engines: weakref.WeakSet = weakref.WeakSet()


def available() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def configure(settings, service_name: str) -> bool:
    """This process's tracer provider (once; a forked Celery child inherits it, and the SDK's batch exporter
    restarts itself after a fork) and Celery instrumented (publish and run). False when tracing is off or not
    installed."""
    global _configured
    if not getattr(settings, "tracing", False) or not available():
        return False
    with _lock:
        if _configured:
            return True
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            log.info("traces exported over OTLP")
        trace.set_tracer_provider(provider)
        _instrument_celery()
        _configured = True
    return True


def _instrument_celery() -> None:
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ImportError:  # the workers extra is absent: no Celery in this process
        return
    inst = CeleryInstrumentor()
    if not inst.is_instrumented_by_opentelemetry:
        inst.instrument()


def instrument_app(app, engine=None) -> None:
    """FastAPI spans (probes and /metrics left out) and the app's database engine."""
    if not _configured:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,readyz,metrics")
    if engine is not None:
        instrument_engine(engine)


def instrument_engine(engine) -> None:
    """SQL spans for `engine` (once per engine)."""
    if not _configured or engine in _engines:
        return
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    inst = SQLAlchemyInstrumentor()
    # skip_dep_check: its declared range ends below SQLAlchemy 2.1, whose engine events it uses unchanged
    if not inst.is_instrumented_by_opentelemetry:
        inst.instrument(engine=engine, enable_commenter=False, skip_dep_check=True)
    else:  # the instrumentor takes one engine per process; a further one (tests build several apps) directly
        from opentelemetry import metrics, trace
        from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer

        usage = metrics.get_meter(__name__).create_up_down_counter("db.client.connections.usage")
        EngineTracer(trace.get_tracer("opentelemetry.instrumentation.sqlalchemy"), engine, usage)
    _engines.add(engine)


def trace_id() -> str | None:
    """The current span's trace id (32 hex digits), or None outside a span or without the extra."""
    if not _configured:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None
