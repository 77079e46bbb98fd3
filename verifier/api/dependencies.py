"""FastAPI dependencies: bearer token -> Principal (401), then action / role policy checks (403).

Endpoints declare the caller they need with one of the `Annotated` aliases at the bottom.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from verifier.api.context import Ctx, ServiceContext
from verifier.auth.jwt import AuthError, Claims
from verifier.auth.principal import Principal
from verifier.base.errors import Forbidden, Unauthorized, clip

bearer = HTTPBearer(auto_error=False, description="JWT signed with an EdDSA, ES256, ES384, RS256 or PS256 key from "
                   "the trusted key set (HERO_JWKS_FILE / HERO_JWKS_URL / HERO_OIDC_ISSUER)")


async def current_principal(
    request: Request, ctx: Ctx, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    # Async, so a request whose token the body guard already checked costs no thread hop; a token checked
    # here is verified in a worker thread, so a JWKS URL fetch never blocks the loop.
    if creds is None or creds.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token")
    claims = getattr(request.state, "hero_claims", None)  # checked by the body guard before the body was read
    if claims is None:
        claims = ctx.tokens.cached(creds.credentials)  # verified before and still valid: no thread hop
    if claims is None:
        try:
            claims = await run_in_threadpool(ctx.tokens.verify, creds.credentials)
        except AuthError as exc:
            raise Unauthorized(str(exc)) from None
    principal = principal_for(ctx, claims)
    request.state.subject = claims.sub
    return principal


def principal_for(ctx: ServiceContext, claims: Claims) -> Principal:
    """The caller a verified token names, under the server policy (403 for a role it does not know, for none
    mapped, and for several unless the policy picks the highest). Its `max_level` is the role's ceiling, not a
    grant: the level a request decodes is granted once, by `ctx.admit` (`Policy.grant`)."""
    role = ctx.policy.known(ctx.policy.resolve(claims.roles))  # 403 for a role the policy does not know
    iss = claims.raw.get("iss")
    return Principal(claims.sub, role.name, claims.jti, role.top(ctx.profile), role.actions,
                     iss if isinstance(iss, str) else "")


def check_action(principal: Principal, action: str) -> Principal:
    if action not in principal.actions:
        raise Forbidden(f"action {action!r} not allowed for role {clip(principal.role)}")
    return principal


def require(action: str):
    async def dep(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        return check_action(principal, action)

    dep.__name__ = f"require_{action.replace('.', '_')}"
    return dep


VerifyCaller = Annotated[Principal, Depends(require("verify"))]
KeyReader = Annotated[Principal, Depends(require("keys.read"))]
KeyAdmin = Annotated[Principal, Depends(require("keys.write"))]
AuditReader = Annotated[Principal, Depends(require("audit.read"))]
EvidenceReader = Annotated[Principal, Depends(require("evidence.read"))]
