"""/v1/keys: list, init, rotate, disable, enable, destroy (metadata only in every response)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request

from verifier.audit.service import AuditEvent, AuditUnavailable, record
from verifier.auth.dependencies import Principal, require
from verifier.bodies import JsonRoute
from verifier.engine.keystore import KeyStoreError
from verifier.keys.schemas import DestroyIn, KeyListOut, KeyVersionOut
from verifier.keys.service import KeyConflict, KeyNotFound, version_meta

router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=JsonRoute)

Level = Annotated[int, Path(ge=1, le=64, description="key level (1 = public)")]
Version = Annotated[str, Path(pattern=r"^l[0-9]{1,4}-v[0-9]{1,9}$", max_length=32, description="e.g. l1-v2")]


def _ctx(request: Request):
    return request.app.state.ctx


def _audit(request: Request, p: Principal, action: str, level: int | None, version: str | None, outcome: str) -> None:
    try:
        record(
            _ctx(request).db,
            [AuditEvent(action, p.sub, p.role, p.jti, [level] if level else [], version, None, outcome)],
        )
    except AuditUnavailable:
        raise HTTPException(503, "audit log unavailable; the change was made but could not be recorded") from None


def _level_ok(request: Request, level: int) -> None:
    depth = _ctx(request).profile.depth
    if level > depth:
        raise HTTPException(404, f"profile has levels 1..{depth}")


def _map(exc: KeyStoreError) -> HTTPException:
    if isinstance(exc, KeyNotFound):
        return HTTPException(404, str(exc))
    if isinstance(exc, KeyConflict):
        return HTTPException(409, str(exc))
    return HTTPException(422, str(exc))


@router.get("", response_model=KeyListOut, summary="List key versions (metadata only)")
def list_keys(request: Request, p: Principal = Depends(require("keys.read"))) -> dict:
    ctx = _ctx(request)
    rows = ctx.store.version_rows(ctx.profile)
    return {"profile": ctx.profile.name, "levels": ctx.profile.depth, "versions": [version_meta(r) for r in rows]}


@router.post("/init", status_code=201, response_model=KeyListOut, summary="Create version 1 of every level")
def init_keys(request: Request, p: Principal = Depends(require("keys.write"))) -> dict:
    ctx = _ctx(request)
    try:
        ctx.store.initialize(ctx.profile)
    except KeyStoreError as exc:
        raise _map(exc) from None
    _audit(request, p, "keys.init", None, None, "ok")
    rows = ctx.store.version_rows(ctx.profile)
    return {"profile": ctx.profile.name, "levels": ctx.profile.depth, "versions": [version_meta(r) for r in rows]}


@router.post("/{level}/rotate", status_code=201, response_model=KeyVersionOut, summary="New active version")
def rotate(level: Level, request: Request, p: Principal = Depends(require("keys.write"))) -> dict:
    _level_ok(request, level)
    ctx = _ctx(request)
    try:
        row = ctx.store.rotate_row(ctx.profile, level)
    except KeyStoreError as exc:
        raise _map(exc) from None
    _audit(request, p, "keys.rotate", level, row.version, "ok")
    return version_meta(row)


@router.post("/{level}/versions/{version}/disable", response_model=KeyVersionOut, summary="Stop decoding a version")
def disable(level: Level, version: Version, request: Request, p: Principal = Depends(require("keys.write"))) -> dict:
    _level_ok(request, level)
    ctx = _ctx(request)
    try:
        row = ctx.store.disable(ctx.profile, level, version)
    except KeyStoreError as exc:
        raise _map(exc) from None
    _audit(request, p, "keys.disable", level, version, "ok")
    return version_meta(row)


@router.post(
    "/{level}/versions/{version}/enable",
    response_model=KeyVersionOut,
    summary="Decode with a disabled version again (it becomes verify-only)",
    responses={404: {}, 409: {"description": "the version is destroyed"}},
)
def enable(level: Level, version: Version, request: Request, p: Principal = Depends(require("keys.write"))) -> dict:
    _level_ok(request, level)
    ctx = _ctx(request)
    try:
        row = ctx.store.enable(ctx.profile, level, version)
    except KeyStoreError as exc:
        raise _map(exc) from None
    _audit(request, p, "keys.enable", level, version, "ok")
    return version_meta(row)


@router.post(
    "/{level}/versions/{version}/destroy",
    response_model=KeyVersionOut,
    summary="Irreversibly destroy a version's key material",
    description="Body must be {\"confirm\": \"<version>\"}. Text made with the version is then reported undecodable.",
)
def destroy(
    level: Level, version: Version, body: DestroyIn, request: Request, p: Principal = Depends(require("keys.write"))
) -> dict:
    _level_ok(request, level)
    ctx = _ctx(request)
    if body.confirm != version:
        raise HTTPException(422, f"destroy is irreversible: send {{\"confirm\": \"{version}\"}} to confirm")
    try:
        row = ctx.store.destroy(ctx.profile, level, version, confirm=body.confirm)
    except KeyStoreError as exc:
        raise _map(exc) from None
    _audit(request, p, "keys.destroy", level, version, "ok")
    return version_meta(row)
