"""/docs (Swagger UI) and /redoc served from the assets of the `fastapi-offline` package: no CDN, no fonts
from elsewhere, so the API docs work on a machine without internet."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from verifier.base.errors import NotFound

ASSET_PREFIX = "/docs/assets"
# The pages' own inline start-up scripts and styles are allowed; any other host is not (ReDoc's side menu
# would otherwise load its logo from the vendor's CDN).
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
       "frame-ancestors 'none'")
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


def _asset(name: str) -> bytes:
    return resources.files("fastapi_offline").joinpath("static", name).read_bytes()


def _locked(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CSP
    page.headers["X-Content-Type-Options"] = "nosniff"
    return page


def install_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Adds /docs, /redoc and their assets (call with docs_url=None, redoc_url=None on the app)."""
    title = f"{app.title} - API docs"

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return _locked(get_swagger_ui_html(
            openapi_url=openapi_url, title=title,
            swagger_js_url=f"{ASSET_PREFIX}/swagger-ui-bundle.js", swagger_css_url=f"{ASSET_PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{ASSET_PREFIX}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # the default badge asks an outside validator
        ))

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _locked(get_redoc_html(
            openapi_url=openapi_url, title=title, redoc_js_url=f"{ASSET_PREFIX}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSET_PREFIX}/favicon.png", with_google_fonts=False,
        ))

    @app.get(ASSET_PREFIX + "/{name}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
        if name not in ASSETS:
            raise NotFound("no such asset")
        return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=86400"})
