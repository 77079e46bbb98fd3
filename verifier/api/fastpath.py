"""POST /v1/verify without FastAPI's per-request machinery, for the requests that need none of it.

At 32 clients the event loop spends more on routing, dependency solving and request/response handling than
the batcher spends on decoding. This pure-ASGI middleware sits right inside the body guard (which has already
authenticated the caller and read the body) and answers a well-formed request itself: the same caller checks
(`principal_for`, `check_action`), the same endpoint body (`verify_call`), the same exception handlers, the
same response bytes (validated and dumped through `VerifyOut`, as FastAPI's `response_model` does). Anything
else (another path or method, no claims from the guard, not exactly `application/json`, a body that is not
`{"texts": [str, ...], "max_level": int 1..64 | null}`, a large body, more than one Authorization header) goes
down the FastAPI route unchanged, so every error message for bad input is the route's own.
HERO_VERIFY_FAST_PATH=0 turns it off (every request takes the route).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import Response

from verifier.api.context import ServiceContext
from verifier.api.dependencies import check_action, principal_for
from verifier.api.middleware import OFFLOOP_BYTES
from verifier.api.verify import verify_call
from verifier.verify.schemas import VerifyOut

PATH = "/v1/verify"
_FIELDS = frozenset({"texts", "max_level"})


def parse_verify_body(body: bytes) -> tuple[list[str], int | None] | None:
    """(texts, max_level) when `body` is a VerifyIn the route would accept as is, else None (the route decides)."""
    if len(body) >= OFFLOOP_BYTES:
        return None
    try:
        data = json.loads(body.decode("utf-8"))  # as verifier.api.bodies.parse_json does
    except (ValueError, RecursionError):  # deep nesting: the route answers 400, as for any unparsable body
        return None
    if type(data) is not dict or not data.keys() <= _FIELDS:
        return None
    texts = data.get("texts")
    if type(texts) is not list or not texts or not all(type(t) is str for t in texts):
        return None
    level = data.get("max_level")
    if level is not None and (type(level) is not int or not 1 <= level <= 64):
        return None
    return texts, level


def _one_json_bearer(headers: list[tuple[bytes, bytes]]) -> bool:
    """Exactly one Authorization header (the one the body guard checked) and content-type application/json."""
    auth = 0
    json_ct = False
    for k, v in headers:
        if k == b"authorization":
            auth += 1
        elif k == b"content-type":
            if json_ct or v != b"application/json":
                return False
            json_ct = True
    return auth == 1 and json_ct


class VerifyFastPath:
    def __init__(self, app, *, ctx: ServiceContext, handlers: Mapping[Any, Any], route: Any = None) -> None:
        self.app = app
        self.ctx = ctx
        self.handlers = handlers  # the app's exception handlers (the same dict FastAPI consults)
        self.route = route  # the /v1/verify APIRoute: what routing would put in scope["route"] (access log)
        self.out = TypeAdapter(VerifyOut)
        self.taken = 0  # requests this path handled (answers and errors alike): statistics, tests

    def _handler(self, exc: Exception):
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None  # left to ServerErrorMiddleware, as on the route
            h = self.handlers.get(cls)
            if h is not None:
                return h
        return None

    async def __call__(self, scope, receive, send):
        state = scope.get("state")
        claims = state.get("hero_claims") if state else None
        if (claims is None or scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST"
                or scope.get("root_path") or not _one_json_bearer(scope["headers"])):
            return await self.app(scope, receive, send)
        message = await receive()
        parsed = None
        if message["type"] == "http.request" and not message.get("more_body", False):
            parsed = parse_verify_body(message.get("body", b""))
        if parsed is None:
            pending = [message]

            async def replay():
                return pending.pop() if pending else await receive()

            return await self.app(scope, replay, send)
        del message
        texts, level = parsed
        self.taken += 1
        if self.route is not None:
            scope["route"] = self.route
        try:
            principal = principal_for(self.ctx, claims)
            state["subject"] = claims.sub
            results = await verify_call(self.ctx, check_action(principal, "verify"), texts, level, None, receive)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response = handler(Request(scope), exc)
            if inspect.isawaitable(response):
                response = await response
            return await response(scope, receive, send)
        value = self.out.validate_python({"results": results}, from_attributes=True)
        body = self.out.dump_json(value, by_alias=True)
        await Response(body, media_type="application/json")(scope, receive, send)
