"""JSON request bodies parsed off the event loop, value by value, with no nesting for large bodies.

Routers use `route_class=JsonRoute`. A body under OFFLOOP_BYTES goes through json.loads as usual.
A larger one is parsed in a worker thread one array element at a time: a single json.loads call would
hold the GIL for its whole run (seconds for 60 MB) and freeze the event loop even from a thread; parsing
element by element lets /healthz and other requests be served in between. Every request schema here is
one object whose values are scalars or flat arrays of scalars, so a large body with nested containers
(`{"texts": [{}, {}, ...]}`: 3 bytes become a ~100-byte Python object) is refused before it is built, and an
array the route's body model declares as strings stops at its first item that is not one (422): a million ints
would otherwise be built, then validated on the event loop with one error object each. An array whose items
may also be one model's objects (`/v1/verify`'s `{"text": ..., "expect": {...}}`) takes those objects too, each
checked as it is parsed: the first item that is neither a string nor a valid object is the one 422.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import anyio
from fastapi import HTTPException, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

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


def _object_item(s: str, i: int, key: str, n: int, adapter: TypeAdapter) -> tuple[Any, int]:
    """One object item of a string-or-object array, validated at once (422 naming it, as the route would)."""
    try:
        value, i = _decoder.raw_decode(s, i)
    except RecursionError:
        raise _fail("Nesting too deep", s, i) from None
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in (key, n, *err["loc"]))
        raise HTTPException(422, f"{loc}: {err['msg']}") from None
    return value, i  # as parsed: the route's body model validates the whole body next


def parse_flat_object(s: str, string_arrays: frozenset[str] = frozenset(),
                      object_items: Mapping[str, TypeAdapter] | None = None) -> dict[str, Any]:
    """Parses `{"k": scalar | [scalar, ...], ...}` element by element; arrays named in `string_arrays` must hold
    strings only (422 at the first other item, before anything after it is parsed), or also, for those named in
    `object_items`, objects that its item type accepts (each validated as it is parsed)."""
    objects = object_items or {}
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
                    strings, adapter = key in string_arrays, objects.get(key)
                    while True:
                        if adapter is not None and i < len(s) and s[i] == "{":
                            value, i = _object_item(s, i, key, len(items), adapter)
                        elif strings and (i >= len(s) or s[i] != '"'):
                            raise HTTPException(422, f"{key}.{len(items)}: Input should be a valid string")
                        else:
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


def parse_json(body: bytes, string_arrays: frozenset[str] = frozenset(),
               object_items: Mapping[str, TypeAdapter] | None = None) -> Any:
    text = body.decode("utf-8")  # the body guard already refused anything else with a 400
    return json.loads(text) if len(body) < OFFLOOP_BYTES else parse_flat_object(text, string_arrays, object_items)


def _bare(t: Any) -> Any:
    return get_args(t)[0] if get_origin(t) is Annotated else t


def _list_items(model: Any):
    """(alias, item type) of a body model's list fields."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return
    for name, f in model.model_fields.items():
        args = get_args(f.annotation) if get_origin(f.annotation) is list else ()
        if args:
            yield f.alias or name, args[0]


def _str_or_models(item: Any) -> tuple[bool, bool]:
    """(a string item is accepted, an object item is too): `str`, or a union of `str` and body models."""
    bare = _bare(item)
    if bare is str:
        return True, False
    if get_origin(bare) in (Union, UnionType):
        members = [_bare(m) for m in get_args(bare)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if str in members and len(models) + 1 == len(members):
            return True, True
    return False, False


def string_array_fields(model: Any) -> frozenset[str]:
    """Names (aliases) of a body model's arrays of strings (`list[str]`, StrictStr included), also those whose
    items may instead be objects of a body model (`list[str | TextIn]`)."""
    return frozenset(name for name, item in _list_items(model) if _str_or_models(item)[0])


def object_item_fields(model: Any) -> dict[str, TypeAdapter]:
    """The string arrays whose items may also be objects: a validator of one item each."""
    return {name: TypeAdapter(item) for name, item in _list_items(model) if _str_or_models(item)[1]}


class OffloopJsonRequest(Request):
    string_arrays: frozenset[str] = frozenset()
    object_items: Mapping[str, TypeAdapter] = {}

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) < OFFLOOP_BYTES:
                self._json = parse_json(body)
            else:
                self._json = await anyio.to_thread.run_sync(parse_json, body, self.string_arrays, self.object_items)
        return self._json


class JsonRoute(APIRoute):
    string_arrays: frozenset[str] = frozenset()  # the body model's list[str] fields (what the parser enforces)

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()
        info = getattr(self.body_field, "field_info", None)
        strings = self.string_arrays = string_array_fields(getattr(info, "annotation", None))
        objects = object_item_fields(getattr(info, "annotation", None))

        async def route_handler(request: Request):
            req = OffloopJsonRequest(request.scope, request.receive)
            req.string_arrays, req.object_items = strings, objects
            return await handler(req)

        return route_handler
