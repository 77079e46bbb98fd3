"""/console: the single-page console, its assets, who the caller is, and dev-mode sign-in tokens."""

from __future__ import annotations

import ipaddress
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from verifier.api.context import Ctx
from verifier.api.dependencies import current_principal
from verifier.auth.principal import Principal
from verifier.base.errors import Forbidden, InvalidInput, NotFound

router = APIRouter(prefix="/console", tags=["console"])

# Same-origin only: the console loads nothing from another host and may only be framed by nobody.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
ASSETS = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
DEV_TTL_S = 3600


def _asset(name: str) -> bytes:
    return resources.files("verifier.api.console").joinpath("static", name).read_bytes()


class WhoAmI(BaseModel):
    subject: str = Field(description="the token's subject")
    role: str = Field(description="the token's role")
    max_level: int = Field(description="deepest level this role may see (server policy)")
    actions: list[str] = Field(description="what this role may do (policies/roles.yaml)")


class ConsoleConfig(BaseModel):
    dev_mode: bool = Field(description="dev-mode sign-in buttons available (HERO_DEV_MODE=1)")
    roles: list[str] = Field(description="roles of the policy (dev sign-in offers these)")
    alpha: float = Field(description="significance threshold of `watermarked` (HERO_ALPHA)")
    audit_actions: list[str] = Field(description="every action an audit event may name (the audit log's filter)")
    max_text_chars: int = Field(description="characters per text (HERO_MAX_TEXT_CHARS): longer texts are offered in "
                                "excerpts")


class DevToken(BaseModel):
    token: str = Field(description="a dev JWT for the role, valid one hour")


@router.get("", response_class=HTMLResponse, include_in_schema=False)
def index() -> Response:
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/assets/{name}", include_in_schema=False)
def asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound("no such asset")
    return Response(_asset(name), media_type=ASSETS[name], headers=SECURITY_HEADERS)


@router.get("/config", response_model=ConsoleConfig, summary="What the console's sign-in page needs")
def config(ctx: Ctx) -> dict:
    from verifier.audit.service import AUDIT_ACTIONS

    return {"dev_mode": ctx.settings.dev_mode, "roles": sorted(ctx.policy.roles) if ctx.settings.dev_mode else [],
            "alpha": ctx.settings.alpha, "audit_actions": list(AUDIT_ACTIONS),
            "max_text_chars": ctx.settings.max_text_chars}


@router.get("/whoami", response_model=WhoAmI, summary="The caller's subject, role, level and actions",
            responses={401: {}, 403: {}})
def whoami(p: Annotated[Principal, Depends(current_principal)]) -> dict:
    return {"subject": p.sub, "role": p.role, "max_level": p.max_level, "actions": sorted(p.actions)}


def _loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_name(value: str) -> bool:
    """A Host (or Origin authority) that names this machine: localhost, 127.0.0.0/8 or [::1], any port."""
    host = value.strip().lower()
    if host.startswith("["):  # [::1]:port
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host in ("localhost", "localhost.") or _loopback_ip(host)


PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")


def _loopback(request: Request) -> bool:
    """The caller is on this machine and talks to it by a loopback name. A Host of another name is a DNS
    rebinding page in a browser; a forwarding header means a reverse proxy relays someone else (behind a proxy
    on this host every client would look loopback), and the dev route trusts no proxy."""
    if not _loopback_ip(request.client.host if request.client else ""):
        return False
    if not _loopback_name(request.headers.get("host", "")):
        return False
    origin = request.headers.get("origin")
    if origin is not None and not _loopback_name(origin.partition("://")[2].partition("/")[0]):
        return False
    return not any(h in request.headers for h in PROXY_HEADERS)


@router.post("/dev-token", response_model=DevToken,
             summary="Dev mode only, from this machine only: a token for a role (404 outside dev mode)",
             responses={403: {}, 404: {}, 422: {}})
def dev_token(request: Request, ctx: Ctx, role: Annotated[str, Query(min_length=1, max_length=64)]) -> dict:
    if not ctx.settings.dev_mode:
        raise NotFound("not found")  # outside dev mode the route does not exist
    if not _loopback(request):  # a dev server bound to a public address must not hand out admin tokens
        raise Forbidden("dev sign-in only from the machine running the service")
    from verifier.auth.devkeys import mint_token

    if ctx.policy.role(role) is None:
        raise InvalidInput("unknown role")
    return {"token": mint_token(ctx.settings, role, f"console-{role}", DEV_TTL_S)}
