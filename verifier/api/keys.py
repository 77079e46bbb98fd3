"""/v1/keys: list, init, rotate, disable, enable, destroy (metadata only in every response).

Each change commits together with its audit event (`DbKeyStore` takes the caller as `actor`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx, ServiceContext
from verifier.api.dependencies import KeyAdmin, KeyReader
from verifier.errors import NotFound
from verifier.keys.schemas import DestroyIn, KeyListOut, KeyVersionOut
from verifier.keys.service import version_meta

router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=JsonRoute)

Level = Annotated[int, Path(ge=1, le=64, description="key level (1 = public)")]
Version = Annotated[str, Path(pattern=r"^l[0-9]{1,4}-v[0-9]{1,9}$", max_length=32, description="e.g. l1-v2")]
ADMIN_RESPONSES: dict = {401: {}, 403: {}, 404: {}, 409: {}, 422: {}, 503: {}}


def _level_ok(ctx: ServiceContext, level: int) -> None:
    if level > ctx.profile.depth:
        raise NotFound(f"profile has levels 1..{ctx.profile.depth}")


def _listing(ctx: ServiceContext) -> dict:
    rows = ctx.store.version_rows(ctx.profile)
    return {"profile": ctx.profile.name, "levels": ctx.profile.depth, "versions": [version_meta(r) for r in rows]}


@router.get("", response_model=KeyListOut, summary="List key versions (metadata only)",
            responses={401: {}, 403: {"description": "role without keys.read"}})
def list_keys(ctx: Ctx, p: KeyReader) -> dict:
    return _listing(ctx)


@router.post("/init", status_code=201, response_model=KeyListOut, summary="Create version 1 of every level",
             responses=ADMIN_RESPONSES)
def init_keys(ctx: Ctx, p: KeyAdmin) -> dict:
    ctx.store.initialize_rows(ctx.profile, actor=p.actor)
    return _listing(ctx)


@router.post("/{level}/rotate", status_code=201, response_model=KeyVersionOut, summary="New active version",
             responses=ADMIN_RESPONSES)
def rotate(level: Level, ctx: Ctx, p: KeyAdmin) -> dict:
    _level_ok(ctx, level)
    return version_meta(ctx.store.rotate_row(ctx.profile, level, actor=p.actor))


@router.post("/{level}/versions/{version}/disable", response_model=KeyVersionOut, summary="Stop decoding a version",
             responses=ADMIN_RESPONSES)
def disable(level: Level, version: Version, ctx: Ctx, p: KeyAdmin) -> dict:
    _level_ok(ctx, level)
    return version_meta(ctx.store.disable(ctx.profile, level, version, actor=p.actor))


@router.post(
    "/{level}/versions/{version}/enable",
    response_model=KeyVersionOut,
    summary="Decode with a disabled version again (it becomes verify-only)",
    responses=ADMIN_RESPONSES,
)
def enable(level: Level, version: Version, ctx: Ctx, p: KeyAdmin) -> dict:
    _level_ok(ctx, level)
    return version_meta(ctx.store.enable(ctx.profile, level, version, actor=p.actor))


@router.post(
    "/{level}/versions/{version}/destroy",
    response_model=KeyVersionOut,
    summary="Irreversibly destroy a version's key material",
    description="Body must be {\"confirm\": \"<version>\"}. Text made with the version is then reported undecodable.",
    responses=ADMIN_RESPONSES,
)
def destroy(level: Level, version: Version, body: DestroyIn, ctx: Ctx, p: KeyAdmin) -> dict:
    _level_ok(ctx, level)
    return version_meta(ctx.store.destroy(ctx.profile, level, version, confirm=body.confirm, actor=p.actor))
