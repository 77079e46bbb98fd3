"""/v1/providers (admin registry) and POST /v1/keys/generation-bundle (a provider's sealed key tables)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path
from fastapi.responses import JSONResponse, Response

from verifier.api.bodies import JsonRoute
from verifier.api.context import Ctx
from verifier.api.dependencies import require
from verifier.auth.principal import Principal
from verifier.base.errors import NotFound
from verifier.keys.decodable import iso
from verifier.registry import service
from verifier.registry.schemas import BundleIn, BundleOut, ProviderIn, ProviderListOut, ProviderOut

router = APIRouter(tags=["providers"], route_class=JsonRoute)

ProviderAdmin = Annotated[Principal, Depends(require("providers.write"))]
ProviderReader = Annotated[Principal, Depends(require("providers.read"))]
BundleCaller = Annotated[Principal, Depends(require("keys.bundle"))]
ProviderId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", max_length=128)]
NO_STORE = {"Cache-Control": "no-store"}


@router.post("/v1/providers", status_code=201, response_model=ProviderOut, summary="Register a provider",
             responses={401: {}, 403: {}, 409: {}, 422: {}, 503: {}})
def add_provider(body: ProviderIn, ctx: Ctx, p: ProviderAdmin) -> dict:
    return service.provider_meta(service.register(ctx.db, body.provider_id, body.public_key, p.actor, body.expires_at,
                                                  body.key_type, issuer=body.issuer,
                                                  trusted=service.trusted_issuers(ctx.settings)))


@router.get("/v1/providers", response_model=ProviderListOut, summary="List providers (public keys, status)",
            responses={401: {}, 403: {}})
def list_providers(ctx: Ctx, p: ProviderReader) -> dict:
    return {"providers": [service.provider_meta(r) for r in service.list_providers(ctx.db)]}


@router.post("/v1/providers/{provider_id}/revoke", response_model=ProviderOut, summary="Revoke a provider",
             responses={401: {}, 403: {}, 404: {}, 503: {}})
def revoke_provider(provider_id: ProviderId, ctx: Ctx, p: ProviderAdmin) -> dict:
    return service.provider_meta(service.revoke(ctx.db, provider_id, p.actor))


@router.post(
    "/v1/keys/generation-bundle",
    response_model=BundleOut,
    summary="The active key tables of every level, sealed to the calling provider's key, signed by the service",
    description="Role `provider`, `sub` = a registered, active provider id, in a token of the issuer it was "
    "registered with. `If-None-Match: \"<etag>\"` answers "
    "304 (nothing sealed, nothing audited) while the key set is unchanged. Each bundle is audited "
    "(`keys.bundle`) with a transparency receipt before it is returned. The bundle (`hero-bundle-3`) is signed "
    "with the service's transparency-log key (`GET /v1/audit/public-key`): the provider SDK refuses one whose "
    "signature does not check against the key it pinned.",
    responses={304: {"description": "Not modified"}, 401: {}, 403: {}, 404: {}, 409: {}, 503: {}},
)
def generation_bundle(
    ctx: Ctx,
    p: BundleCaller,
    body: BundleIn | None = None,
    if_none_match: Annotated[str | None, Header(max_length=512)] = None,
) -> Response:
    if body is not None and body.profile not in (None, ctx.profile.name):
        raise NotFound(f"this service issues bundles for profile {ctx.profile.name!r} only")
    issued = service.issue_bundle(
        ctx.db, ctx.store, ctx.profile, p.actor, if_none_match=if_none_match, signer=ctx.signer,
        ttl=timedelta(seconds=ctx.settings.bundle_ttl_seconds),
        interval_s=ctx.settings.checkpoint_interval_seconds, trusted=service.trusted_issuers(ctx.settings),
    )
    if isinstance(issued, str):
        return Response(status_code=304, headers={"ETag": f'"{issued}"', **NO_STORE})
    out = {
        "bundle": base64.b64encode(issued.bundle).decode(),
        "etag": issued.etag,
        "bundle_id": issued.bundle_id,
        "profile": ctx.profile.name,
        "key_versions": issued.key_versions,
        "expires_at": iso(issued.expires_at),
        "receipt": issued.receipt,
    }
    return JSONResponse(out, headers={"ETag": f'"{issued.etag}"', **NO_STORE})
