"""FastAPI dependencies: bearer token -> Principal (401), then action / role policy checks (403)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from verifier.auth.jwt import AuthError

bearer = HTTPBearer(auto_error=False, description="JWT signed with an EdDSA or ES256 key from the trusted key set")


@dataclass(frozen=True)
class Principal:
    sub: str
    role: str
    jti: str
    max_level: int
    actions: frozenset[str]
    iss: str = ""  # token issuer: identity is (iss, sub), never sub alone


def _unauthorized(msg: str) -> HTTPException:
    return HTTPException(status_code=401, detail=msg, headers={"WWW-Authenticate": "Bearer"})


def current_principal(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Principal:
    # Sync on purpose: FastAPI runs it in a worker thread, so a JWKS URL fetch never blocks the loop.
    ctx = request.app.state.ctx
    if creds is None or creds.scheme.lower() != "bearer":
        raise _unauthorized("missing bearer token")
    claims = getattr(request.state, "hero_claims", None)  # checked by the body guard before the body was read
    if claims is None:
        try:
            claims = ctx.tokens.verify(creds.credentials)
        except AuthError as exc:
            raise _unauthorized(str(exc)) from None
    role = ctx.policy.role(claims.role)
    if role is None:
        raise HTTPException(status_code=403, detail="role not allowed by server policy")
    request.state.subject = claims.sub
    iss = claims.raw.get("iss")
    return Principal(claims.sub, role.name, claims.jti, role.level_limit(ctx.profile.depth), role.actions,
                     iss if isinstance(iss, str) else "")


def require(action: str):
    def dep(principal: Principal = Depends(current_principal)) -> Principal:
        if action not in principal.actions:
            raise HTTPException(status_code=403, detail=f"action {action!r} not allowed for role {principal.role!r}")
        return principal

    dep.__name__ = f"require_{action.replace('.', '_')}"
    return dep
