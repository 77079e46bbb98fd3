"""/v1/keys: list, init, rotate, disable, enable, destroy, issued values (metadata only in every response).

Each change commits together with its audit event (`DbKeyStore` takes the caller as `actor`).
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query
from starlette.concurrency import run_in_threadpool

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx, ServiceContext
from verifier.api.dependencies import KeyAdmin, KeyReader
from verifier.base.errors import Conflict, InvalidInput, NotFound
from verifier.keys.schemas import DestroyIn, IssuedOut, IssueIn, KeyInitIn, KeyListOut, KeyVersionOut
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
             description="Keys for the profile the deployment serves. With `{\"models\": [37, 41]}` (as `hero keys "
             "init --models 37,41`): keys for the deployment's own copy of that profile (NAME-deployment in its "
             "profiles folder) issuing those model ids, recorded as the profile the deployment serves.",
             responses={**ADMIN_RESPONSES, 409: {"description": "keys exist already, or another profile has keys"},
                        422: {"description": "bad input (e.g. a model id out of range, a profile before spec v4)"}})
def init_keys(ctx: Ctx, p: KeyAdmin, body: Annotated[KeyInitIn | None, Body()] = None) -> dict:
    if body is None or body.models is None:
        ctx.store.initialize_rows(ctx.profile, actor=p.actor)
        return _listing(ctx)
    from verifier.engine.profile import ProfileError
    from verifier.keys.deployment import stored_profiles
    from verifier.keys.issued import issued_copy, own_copy_name

    own = own_copy_name(ctx.profile.name)
    stored = stored_profiles(ctx.db)
    if own in stored:
        raise Conflict(f"keys for profile {own!r} already exist; issue more model ids with POST /v1/keys/issued")
    if stored:
        raise Conflict(f"this deployment already has keys for profile {', '.join(map(repr, stored))}; "
                       f"move it with `hero profile use NAME`")
    try:
        profile, _path = issued_copy(ctx.profile, own, body.models)
    except ProfileError as exc:
        raise InvalidInput(f"models: {exc}") from None
    except ValueError as exc:
        raise InvalidInput(str(exc).replace(str(_path_hint()), "the profiles folder")) from None
    ctx.store.use_profile(profile, actor=p.actor)
    ctx.profile = profile  # this process serves it now; others read the recorded choice when they start
    return _listing(ctx)


def _path_hint() -> object:
    from verifier.engine.profile import deployment_profiles_dir

    return deployment_profiles_dir()


def _issued(ctx: ServiceContext, field: str) -> list[int] | None:
    from verifier.keys.issued import issued_of

    if not any(f.name == field for lv in ctx.profile.levels for f in lv.fields):
        raise NotFound(f"profile {ctx.profile.name!r} has no field {field!r}")
    return issued_of(ctx.profile, field)


@router.get("/issued", response_model=IssuedOut, response_model_exclude_none=False,
            summary="The values the deployment has issued (e.g. its model ids)",
            responses={401: {}, 403: {"description": "role without keys.read"},
                       404: {"description": "the profile has no such field"}, 422: {}})
def list_issued(ctx: Ctx, p: KeyReader,
                field: Annotated[str, Query(pattern=r"^[a-z][a-z0-9_]{0,31}$")] = "model") -> dict:
    return {"profile": ctx.profile.name, "field": field, "issued": _issued(ctx, field)}


@router.post(
    "/issued", response_model=IssuedOut, summary="Issue values (e.g. a new model id): the list only grows",
    description="Appends to the issued list of the profile the deployment serves, which must be the deployment's "
    "own (in its profiles folder: `hero keys init --models` or `hero profile new` writes one); the same as `hero "
    "profile issue`. Keys do not change: texts made earlier keep decoding. Audited (`keys.issue`). Nothing removes "
    "a value.",
    responses={**ADMIN_RESPONSES, 404: {"description": "the profile has no such field"},
               409: {"description": "the served profile is a shipped (read-only) profile, or its level lists no "
                                    "issued values"},
               422: {"description": "bad input (e.g. a value out of the field's range)"}})
async def issue(body: IssueIn, ctx: Ctx, p: KeyAdmin) -> dict:
    return await run_in_threadpool(_issue, body, ctx, p)


_ISSUING = threading.Lock()  # one read-append-replace of the profile file at a time in this process


def _issue(body: IssueIn, ctx: ServiceContext, p) -> dict:
    with _ISSUING:
        return _issue_locked(body, ctx, p)


def _issue_locked(body: IssueIn, ctx: ServiceContext, p) -> dict:
    from verifier.engine.profile import ProfileError, resolve_profile
    from verifier.keys.issued import NotDeploymentProfile, NotIssuing, issue_detail, issue_values

    _issued(ctx, body.field)  # 404 for a field the profile lacks
    try:
        done = issue_values(ctx.profile.name, body.values, body.field)
    except NotDeploymentProfile:
        raise Conflict(f"profile {ctx.profile.name!r} is a shipped profile (read-only): make the deployment's own "
                       "copy with `hero keys init --models ID,...` (POST /v1/keys/init with models) or `hero profile "
                       "new NAME --from ... --issued ...`, then issue values to it") from None
    except NotIssuing as exc:
        raise Conflict(str(exc)) from None
    except ProfileError as exc:
        raise InvalidInput(f"values: {exc}") from None
    ctx.store.record_issue(done.profile.name, issue_detail(done), actor=p.actor)
    ctx.profile = resolve_profile(ctx.profile.name)  # this process decodes with the longer list from now on
    return {"profile": done.profile.name, "field": done.field, "issued": done.issued, "added": done.added,
            "already_issued": done.already_issued}


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
