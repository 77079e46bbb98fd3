"""ASGI middleware: request body size limit (413), request logging + metrics."""

from __future__ import annotations

import json
import logging
import time
import uuid

from verifier.metrics import AUTH_FAILURES, REQUEST_SECONDS, REQUESTS

log = logging.getLogger("hero.http")


async def _send_json(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Rejects bodies over `limit` bytes: by Content-Length up front, else by counting the stream."""

    def __init__(self, app, limit: int, overrides: dict[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.overrides = dict(overrides or {})  # exact path -> limit (e.g. /v1/jobs takes corpora)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.overrides.get(scope.get("path", ""), self.limit)
        msg = f"request body too large (limit {limit} bytes)"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    n = int(value)
                except ValueError:
                    return await _send_json(send, 400, "invalid Content-Length header")
                if n > limit:
                    return await _send_json(send, 413, msg)
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await _send_json(send, 413, msg)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class AccessLogMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        rid = uuid.uuid4().hex[:16]
        status_holder = {"status": 500}
        scope.setdefault("state", {})["request_id"] = rid

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            status = status_holder["status"]
            dur = time.perf_counter() - start
            REQUESTS.labels(scope["method"], template, str(status)).inc()
            REQUEST_SECONDS.labels(scope["method"], template).observe(dur)
            if status in (401, 403):
                AUTH_FAILURES.labels(str(status)).inc()
            state = scope.get("state", {})
            log.info(
                "request",
                extra={
                    "request_id": rid,
                    "method": scope["method"],
                    "path": template,
                    "status": status,
                    "duration_ms": round(dur * 1000, 2),
                    "subject": state.get("subject"),
                },
            )
