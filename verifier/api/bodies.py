"""JSON request bodies parsed off the event loop, value by value, with no nesting for large bodies.

Routers use `route_class=JsonRoute`. A body under OFFLOOP_BYTES goes through json.loads as usual.
A larger one is parsed in a worker thread one array element at a time: a single json.loads call would
hold the GIL for its whole run (seconds for 60 MB) and freeze the event loop even from a thread; parsing
element by element lets /healthz and other requests be served in between. Every request schema here is
one object whose values are scalars or flat arrays of scalars, so a large body with nested containers
(`{"texts": [{}, {}, ...]}`: 3 bytes become a ~100-byte Python object) is refused before it is built, and an
array the route's body model declares as strings stops at its first item that is not one (422): a million ints
would otherwise be built, then validated on the event loop with one error object each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

import anyio
from fastapi import HTTPException, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel

from verifier.api.middleware import OFFLOOP_BYTES

MAX_ARRAY_ITEMS = 1_000_000  # a bound on work only; per-route limits (HERO_JOB_MAX_TEXTS, ...) come later
_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def _ws(s: str, i: int) -> int:
    m = _WS.match(s, i)
    return m.end() if m else i


def _fail(msg: str, s: str, i: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(msg, s, i)


def _scalar(s: str, i: int) -> tuple[Any, int]:
    if i < len(s) and s[i] in "{[":
        raise HTTPException(422, "body: nested objects or arrays are not accepted here")
    return _decoder.raw_decode(s, i)


def parse_flat_object(s: str, string_arrays: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Parses `{"k": scalar | [scalar, ...], ...}` element by element; arrays named in `string_arrays` must hold
    strings only (422 at the first other item, before anything after it is parsed)."""
    i = _ws(s, 0)
    if i >= len(s) or s[i] != "{":
        raise _fail("Expecting '{'", s, i)
    out: dict[str, Any] = {}
    i = _ws(s, i + 1)
    if i < len(s) and s[i] == "}":
        i += 1
    else:
        while True:
            if i >= len(s) or s[i] != '"':
                raise _fail("Expecting property name enclosed in double quotes", s, i)
            key, i = _decoder.raw_decode(s, i)
            i = _ws(s, i)
            if i >= len(s) or s[i] != ":":
                raise _fail("Expecting ':' delimiter", s, i)
            i = _ws(s, i + 1)
            if i < len(s) and s[i] == "[":
                items: list[Any] = []
                i = _ws(s, i + 1)
                if i < len(s) and s[i] == "]":
                    i += 1
                else:
                    strings = key in string_arrays
                    while True:
                        if strings and (i >= len(s) or s[i] != '"'):
                            raise HTTPException(422, f"{key}.{len(items)}: Input should be a valid string")
                        value, i = _scalar(s, i)
                        items.append(value)
                        if len(items) > MAX_ARRAY_ITEMS:
                            raise HTTPException(413, f"body: more than {MAX_ARRAY_ITEMS} array items")
                        i = _ws(s, i)
                        if i < len(s) and s[i] == ",":
                            i = _ws(s, i + 1)
                            continue
                        if i < len(s) and s[i] == "]":
                            i += 1
                            break
                        raise _fail("Expecting ',' delimiter", s, i)
                out[key] = items
            else:
                out[key], i = _scalar(s, i)
            i = _ws(s, i)
            if i < len(s) and s[i] == ",":
                i = _ws(s, i + 1)
                continue
            if i < len(s) and s[i] == "}":
                i += 1
                break
            raise _fail("Expecting ',' delimiter", s, i)
    if _ws(s, i) != len(s):
        raise _fail("Extra data", s, i)
    return out


def parse_json(body: bytes, string_arrays: frozenset[str] = frozenset()) -> Any:
    text = body.decode("utf-8")  # the body guard already refused anything else with a 400
    return json.loads(text) if len(body) < OFFLOOP_BYTES else parse_flat_object(text, string_arrays)


def string_array_fields(model: Any) -> frozenset[str]:
    """Names (aliases) of a body model's `list[str]` fields (StrictStr included)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return frozenset()
    out = set()
    for name, f in model.model_fields.items():
        args = get_args(f.annotation) if get_origin(f.annotation) is list else ()
        item = args[0] if args else None
        if item is str or (get_origin(item) is Annotated and get_args(item)[0] is str):
            out.add(f.alias or name)
    return frozenset(out)


class OffloopJsonRequest(Request):
    string_arrays: frozenset[str] = frozenset()

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) < OFFLOOP_BYTES:
                self._json = parse_json(body)
            else:
                self._json = await anyio.to_thread.run_sync(parse_json, body, self.string_arrays)
        return self._json


class JsonRoute(APIRoute):
    string_arrays: frozenset[str] = frozenset()  # the body model's list[str] fields (what the parser enforces)

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()
        info = getattr(self.body_field, "field_info", None)
        strings = self.string_arrays = string_array_fields(getattr(info, "annotation", None))

        async def route_handler(request: Request):
            req = OffloopJsonRequest(request.scope, request.receive)
            req.string_arrays = strings
            return await handler(req)

        return route_handler
