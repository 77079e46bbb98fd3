"""FastAPI application factory for the HeRo verification service."""

from __future__ import annotations

import gc
import inspect
import logging
import signal
import threading
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from verifier import __version__
from verifier.api.audit import router as audit_router
from verifier.api.console.apidocs import install_docs
from verifier.api.console.endpoints import router as console_router
from verifier.api.context import Ctx, ServiceContext, build_context
from verifier.api.dependencies import require
from verifier.api.fastpath import PATH as FAST_PATH
from verifier.api.fastpath import VerifyFastPath
from verifier.api.jobs import router as jobs_router
from verifier.api.keys import router as keys_router
from verifier.api.middleware import AccessLogMiddleware, BodyGuardMiddleware
from verifier.api.providers import router as providers_router
from verifier.api.verify import router as verify_router
from verifier.audit.service import AuditUnavailable
from verifier.auth.jwt import AuthError
from verifier.auth.principal import Principal
from verifier.base.cancel import SHUTDOWN, overdue
from verifier.base.errors import ECHO_LIMIT, DomainError
from verifier.base.metrics import AUDIT_FAILURES, exposition
from verifier.base.settings import Settings, get_settings
from verifier.base.tracing import configure as configure_tracing
from verifier.base.tracing import instrument_app

log = logging.getLogger("hero.app")

DESCRIPTION = (
    "Selective-disclosure watermark verification. Bearer JWT (EdDSA/ES256); the role decides the deepest level "
    "disclosed. Every disclosure is recorded in a hash-chained audit log that is also a signed transparency log."
)


def _authenticator(ctx: ServiceContext):
    """For the body guard: checks the bearer token before any body byte is read (runs in a thread)."""

    def authenticate(token: str | None):
        if token is None:
            return None, "missing bearer token"
        try:
            return ctx.tokens.verify(token), None
        except AuthError as exc:
            return None, str(exc)

    return authenticate


ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "properties": {
        "detail": {"title": "Detail", "type": "string", "description": "what went wrong (never echoes input)"}
    },
    "required": ["detail"],
}


def _openapi_with_error_shape(app: FastAPI) -> dict:
    """Every 4xx/5xx is `{"detail": "<message>"}` (422 included), so the schema says exactly that."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    comps.pop("HTTPValidationError", None)
    comps.pop("ValidationError", None)
    comps["Error"] = ERROR_SCHEMA
    for path, item in schema.get("paths", {}).items():
        for op in item.values():
            _declare_guard_errors(path, op)
            for code, resp in op.get("responses", {}).items():
                if code.isdigit() and int(code) >= 400:
                    resp["content"] = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                    if not resp.get("description") or resp["description"] == "Additional Response":
                        resp["description"] = "Error"
    app.openapi_schema = schema
    return schema


def _declare_guard_errors(path: str, op: dict) -> None:
    """What the middleware may answer before a route runs: 400 on any request (two Authorization headers, a bad
    Content-Length or a body that is not UTF-8), 401 on /v1 and on routes taking a token, and 403 there too (a
    valid token whose role the policy does not know, or maps to none), 413 with a body; /metrics is Prometheus
    text."""
    responses = op.setdefault("responses", {})
    extra = ["400"]
    if path.startswith("/v1/") or "security" in op or (path == "/metrics" and "403" in responses):
        extra += ["401", "403"]
    if "requestBody" in op:
        extra.append("413")
    for code in extra:
        responses.setdefault(code, {"description": "Error"})
    if path == "/metrics" and "200" in responses:
        responses["200"]["content"] = {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        loc = loc if len(loc) <= ECHO_LIMIT else loc[: ECHO_LIMIT - 3] + "..."  # a field name is caller input
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")  # never echo the input value
    return "; ".join(parts) or "invalid request"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def domain_error(request: Request, exc: DomainError) -> JSONResponse:
        if isinstance(exc, AuditUnavailable):
            AUDIT_FAILURES.inc()
        if exc.status >= 500:
            log.warning("request failed", extra={"status": exc.status, "error": exc.__class__.__name__})
        return JSONResponse({"detail": exc.detail()}, status_code=exc.status, headers=dict(exc.headers or {}))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names the first matching route's methods only: name every route's
            allow = allowed_methods(request.app, request.url.path)
            headers = {**(headers or {}), "Allow": allow} if allow else headers
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.exception_handler(OperationalError)
    async def database_busy(request: Request, exc: OperationalError) -> JSONResponse:
        # Lock timeouts ("database is locked"), serialisation failures, deadlocks, lost connections: all
        # transient, none the caller's fault. Type only in the log: the message may quote SQL parameters.
        log.warning("database busy or unavailable", extra={"error": exc.orig.__class__.__name__})
        return JSONResponse({"detail": "database busy or unavailable; retry shortly"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # Type only: exception text may quote inputs and must never reach the client or the logs.
        log.error("unhandled error", extra={"error": exc.__class__.__name__})
        return JSONResponse({"detail": "internal error"}, status_code=500)


def stop_work_on_signals() -> None:
    """Wraps the server's SIGTERM/SIGINT handlers (uvicorn's, installed before the lifespan starts) so that the
    signal also sets verifier.base.cancel.SHUTDOWN: a decode in a worker thread stops at its next check instead of
    holding the shutdown until SIGKILL. Main thread only (where signal handlers live; not under a test client)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if getattr(previous, "hero_stops_work", False):
            continue

        def handler(signum, frame, previous=previous):
            SHUTDOWN.set()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        handler.hero_stops_work = True  # type: ignore[attr-defined]
        signal.signal(sig, handler)


def _ops_routes(app: FastAPI, settings: Settings) -> None:
    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], summary="Readiness (database and, if configured, broker reachable)",
             responses={503: {}})
    def readyz(ctx: Ctx) -> Response:
        stuck = overdue()
        if stuck:  # a decode that no longer reaches its deadline checks: this worker is not serving
            log.warning("decode past its deadline", extra={"decodes": stuck})
            return JSONResponse({"detail": f"{stuck} decode(s) running past their deadline"}, status_code=503)
        try:
            ctx.db.ping()
        except Exception as exc:
            log.warning("database not reachable", extra={"error": exc.__class__.__name__})
            return JSONResponse({"detail": "database unreachable"}, status_code=503)
        try:
            ctx.jobs.ping()
        except Exception as exc:
            log.warning("broker not reachable", extra={"error": exc.__class__.__name__})
            return JSONResponse({"detail": "broker unreachable"}, status_code=503)
        if settings.dev_mode:  # the profile served, for a developer; in production only ready or not (issue 52)
            return JSONResponse({"status": "ready", "profile": ctx.profile.name})
        return JSONResponse({"status": "ready"})

    if settings.metrics_exposure == "public":

        @app.get("/metrics", tags=["ops"], summary="Prometheus metrics")
        def metrics() -> Response:
            return Response(exposition(public=True), media_type=CONTENT_TYPE_LATEST)

    elif settings.metrics_exposure == "auth":

        @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (role with metrics.read)",
                 responses={401: {}, 403: {}})
        def metrics_auth(p: Principal = Depends(require("metrics.read"))) -> Response:
            return Response(exposition(), media_type=CONTENT_TYPE_LATEST)


# FastAPI >= 0.16x hooks OpenTelemetry into every request (spans, metrics and logs of exception messages to any
# globally configured provider). The service exports Prometheus metrics and logs only its safe-listed fields, so
# the hooks stay off: nothing leaves through an exporter nobody reviewed, and a request no longer pays the
# per-request provider lookups (~3 % of a single-text /v1/verify's CPU). Older FastAPI has no such hooks.
_NO_NATIVE_TELEMETRY: dict = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}
)


def allowed_methods(app, path: str) -> str | None:
    """The documented methods at `path` (a path's GET and POST are often two routes, and Starlette's 405 names
    the first one's only), for a 405's `Allow` (RFC 9110 section 15.5.6); None for a path the OpenAPI omits."""
    import re

    table = getattr(app.state, "allow_table", None)
    if table is None:
        table = [(re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(p)) + "$"),
                  {m.upper() for m in ops if m in ("get", "put", "post", "delete", "patch", "head", "options")})
                 for p, ops in app.openapi().get("paths", {}).items()]
        app.state.allow_table = table
    methods = set().union(*(m for rx, m in table if rx.match(path)))
    return ", ".join(sorted(methods)) or None


def create_app(
    settings: Settings | None = None,
    *,
    tokenizer_loader: Callable[[str], Any] | None = None,
) -> FastAPI:
    settings = settings or get_settings()
    ctx: ServiceContext = build_context(settings, tokenizer_loader=tokenizer_loader)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        stop_work_on_signals()  # SIGTERM: long decodes stop at their next check, so shutdown takes seconds
        ctx.jobs.start()  # resume jobs a previous process left unfinished
        yield
        ctx.close()

    docs = settings.docs_exposure == "public" and bool(settings.public_docs)  # HERO_PUBLIC_DOCS
    app = FastAPI(
        title="HeRo Verifier", version=__version__, description=DESCRIPTION, lifespan=lifespan,
        docs_url=None, redoc_url=None, openapi_url="/openapi.json" if docs else None, **_NO_NATIVE_TELEMETRY,
    )
    if docs:
        install_docs(app)  # Swagger UI and ReDoc from local assets (no CDN)
    app.state.ctx = ctx
    if configure_tracing(settings, "hero-api"):
        instrument_app(app, ctx.db.engine)
    app.openapi = lambda: _openapi_with_error_shape(app)  # type: ignore[method-assign]
    _install_error_handlers(app)
    _ops_routes(app, settings)
    for router in (verify_router, jobs_router, keys_router, audit_router, console_router, providers_router):
        app.include_router(router)
    if settings.verify_fast_path:  # inside the body guard: runs on authenticated, fully read requests only
        route = next((r for r in verify_router.routes if getattr(r, "path", None) == FAST_PATH
                      and "POST" in getattr(r, "methods", ())), None)
        app.add_middleware(VerifyFastPath, ctx=ctx, handlers=app.exception_handlers, route=route)
    from verifier.verify.admission import text_limits  # each path's text limits, said with its body limit (413)

    app.add_middleware(
        BodyGuardMiddleware,
        limit=settings.max_body_bytes,
        overrides={"/v1/jobs": settings.job_max_body_bytes},
        unauth_limit=settings.unauth_max_body_bytes,
        notes={"/v1/verify": text_limits(settings.max_texts, settings.max_text_chars),
               "/v1/verify/evidence": text_limits(1, settings.max_text_chars),
               "/v1/jobs": text_limits(settings.job_max_texts, settings.max_text_chars)},
        authenticate=_authenticator(ctx),
        recall=ctx.tokens.cached,
        may_override=lambda claims: "verify" in getattr(ctx.policy.role(claims.role), "actions", ()),
    )
    app.add_middleware(AccessLogMiddleware)
    return app


def freeze_startup_heap() -> None:
    """Moves everything allocated at start-up (torch, the tokenizer, the app) out of the garbage collector's
    reach. Why: otherwise every full collection walks those millions of objects again, a 100-250 ms pause of
    the whole process (measured at 32 clients: the p99 latency). Objects are still freed by refcount."""
    gc.collect()
    gc.freeze()


def app_from_env() -> FastAPI:  # uvicorn --factory verifier.api.app:app_from_env (also each `hero serve --workers N`)
    """The app from the environment, its tokenizer loaded now: a worker's first request must not pay for it."""
    app = create_app(get_settings())
    ctx = app.state.ctx
    ctx.tokenizers.for_profile(ctx.profile)
    freeze_startup_heap()
    return app
