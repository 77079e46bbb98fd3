"""Pure-ASGI middleware: authenticate-then-read body guard (401/413/400), request logging + metrics.

The guard runs before any route code: a request that carries a body is authenticated first (token
checked in a worker thread, JWKS fetches never block the loop; a token already verified and still valid
is recalled on the loop, no thread hop), and only then is its body read, counting
bytes as they stream in and stopping at the limit that applies (per path for authenticated callers,
HERO_UNAUTH_MAX_BODY_BYTES otherwise; /v1 routes read nothing at all from an unauthenticated caller).
Bodies must be UTF-8 (RFC 8259 §8.1): anything else is a 400 before JSON parsing. A request with more than one
Authorization header is a 400 whatever its method (bodies were authorised by the last, GETs by the first).
"""

from __future__ import annotations

import codecs
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import anyio

from verifier.base.metrics import AUTH_FAILURES, BODY_REJECTIONS, REQUEST_SECONDS, REQUESTS

log = logging.getLogger("hero.http")

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OFFLOOP_BYTES = 256 * 1024  # JSON bodies above this are parsed in a worker thread (verifier.api.bodies)

# authenticate(token) -> (claims, None) or (None, reason). Blocking: called in a worker thread.
Authenticator = Callable[[str | None], tuple[Any, str | None]]
# recall(token) -> claims of a token already verified and still valid, else None. Never blocks: called on the loop.
Recall = Callable[[str], Any]


def method_label(method: str) -> str:
    """A fixed label set: an attacker choosing methods cannot create metric series."""
    return method if method in KNOWN_METHODS else "other"


async def _send_json(send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _bearer(headers: dict[bytes, bytes]) -> str | None:
    raw = headers.get(b"authorization")
    if not raw:
        return None
    scheme, _, cred = raw.decode("latin-1").partition(" ")
    return cred.strip() if scheme.lower() == "bearer" and cred.strip() else None


class BodyGuardMiddleware:
    """Authenticate, then read the body within its limit; hand the buffered, UTF-8-checked body on."""

    def __init__(
        self,
        app,
        *,
        limit: int,
        authenticate: Authenticator,
        overrides: dict[str, int] | None = None,
        unauth_limit: int = 1024,
        protected_prefix: str = "/v1/",
        recall: Recall | None = None,
        may_override: Callable[[Any], bool] | None = None,
        notes: dict[str, str] | None = None,
    ) -> None:
        self.app = app
        self.may_override = may_override  # claims -> may this caller use the per-path limits (a role that verifies)
        self.notes = dict(notes or {})  # path -> the path's other limits, said with the body limit (one 413 says all)
        self.recall = recall
        self.limit = limit
        self.authenticate = authenticate
        self.overrides = dict(overrides or {})  # exact path -> limit (e.g. /v1/jobs takes corpora)
        self.unauth_limit = unauth_limit
        self.protected_prefix = protected_prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        raw_headers = scope.get("headers", [])
        if sum(k == b"authorization" for k, _ in raw_headers) > 1:  # which one would count differs by route
            BODY_REJECTIONS.labels("duplicate_authorization").inc()
            return await _send_json(send, 400, "more than one Authorization header")
        headers = dict(raw_headers)
        declared = None
        if b"content-length" in headers:
            try:
                declared = int(headers[b"content-length"])
                if declared < 0:
                    raise ValueError
            except ValueError:
                return await _send_json(send, 400, "invalid Content-Length header")
        has_body = (declared or 0) > 0 or b"transfer-encoding" in headers
        if not has_body:
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        token = _bearer(headers)
        claims = self.recall(token) if token is not None and self.recall is not None else None
        why = None
        if claims is None:  # not verified before: the full check, in a worker thread (a JWKS fetch may wait)
            claims, why = (None, "missing bearer token") if token is None else await anyio.to_thread.run_sync(
                self.authenticate, token
            )
        if claims is None and path.startswith(self.protected_prefix):
            BODY_REJECTIONS.labels("unauthenticated").inc()
            return await _send_json(send, 401, why or "invalid token", [(b"www-authenticate", b"Bearer")])
        note = self.notes.get(path) if claims is not None else None  # the path's other limits, said at once
        if claims is None:
            limit = self.unauth_limit
        elif path in self.overrides and (self.may_override is None or self.may_override(claims)):
            limit = self.overrides[path]
        else:  # e.g. a provider token or an unknown role on /v1/jobs: the route will refuse it; read little
            limit = self.limit
        msg = f"request body too large (limit {limit} bytes{'; ' + note if note else ''})"
        if declared is not None and declared > limit:
            BODY_REJECTIONS.labels("too_large").inc()
            return await _send_json(send, 413, msg)
        buf = bytearray()  # one growing (mmap-backed) buffer: received chunks are freed as they are copied in
        size = 0
        utf8 = codecs.getincrementaldecoder("utf-8")()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                BODY_REJECTIONS.labels("too_large").inc()
                return await _send_json(send, 413, msg)
            more = message.get("more_body", False)
            if not _utf8_ok(utf8, chunk, final=not more):
                BODY_REJECTIONS.labels("not_utf8").inc()
                return await _send_json(send, 400, "request body is not UTF-8 (JSON must be UTF-8, RFC 8259)")
            buf += chunk
            del chunk, message
            if not more:
                break
        if claims is not None:
            scope.setdefault("state", {})["hero_claims"] = claims
        pending = [bytes(buf)]
        del buf

        async def replay():
            if pending:  # handed over once, then forgotten here: the app holds the only copy
                return {"type": "http.request", "body": pending.pop(), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def _utf8_ok(decoder, chunk: bytes, *, final: bool) -> bool:
    """Incremental strict UTF-8 check (no copy of ASCII chunks; sequences may span chunks).

    A NUL byte is refused too: JSON text never contains one raw, and UTF-16/32 text of ASCII characters
    is NUL-riddled byte soup that would otherwise pass as "valid UTF-8".
    """
    if b"\x00" in chunk:
        return False
    try:
        if chunk.isascii() and not decoder.getstate()[0]:
            return True
        decoder.decode(chunk, final)
        if final:
            decoder.decode(b"", True)
        return True
    except UnicodeDecodeError:
        return False


class AccessLogMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        rid = secrets.token_hex(8)  # 16 hex characters, as uuid4().hex[:16] was, at a third of the cost
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
            method = method_label(scope["method"])
            REQUESTS.labels(method, template, str(status) if 100 <= status < 600 else "other").inc()
            REQUEST_SECONDS.labels(method, template).observe(dur)
            if status in (401, 403):
                AUTH_FAILURES.labels(str(status)).inc()
            state = scope.get("state", {})
            log.info(
                "request",
                extra={
                    "request_id": rid,
                    "method": method,
                    "path": template,
                    "status": status,
                    "duration_ms": round(dur * 1000, 2),
                    "subject": state.get("subject"),
                },
            )
