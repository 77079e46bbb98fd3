"""A live HeRo server (uvicorn in a thread, 127.0.0.1, random port) and a Chromium page driven by Playwright.

Debian's chromium is used through `executable_path` (scripts/install-browser); Playwright's own browser
downloads are never used. Without Playwright or chromium the browser tests skip, unless
HERO_REQUIRE_BROWSER=1 (CI), where they fail. Every request to a host other than the server is blocked and
recorded, so a test can assert that a page needs nothing from the network."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    explicit = os.environ.get("HERO_CHROMIUM")
    if explicit:
        return explicit
    return next((p for p in map(shutil.which, CHROMIUM_CANDIDATES) if p), None)


def require_browser() -> str:
    """The chromium executable, or skip (fail when HERO_REQUIRE_BROWSER=1)."""
    strict = os.environ.get("HERO_REQUIRE_BROWSER") == "1"
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "playwright is not installed (pip install -e '.[dev]')"
    exe = chromium_path()
    if problem is None and exe is None:
        problem = "chromium not found (scripts/install-browser)"
    if problem:
        if strict:
            pytest.fail(problem)
        pytest.skip(problem)
    return exe  # type: ignore[return-value]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(settings) -> Iterator[SimpleNamespace]:
    """The service app on 127.0.0.1:<random port>; yields (url, ctx, settings); stops it afterwards."""
    import uvicorn

    from tests.helpers.service import cached_tokenizer_loader
    from verifier.api.app import create_app

    app = create_app(settings, tokenizer_loader=cached_tokenizer_loader)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 300  # polled: a bound for a loaded machine
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}", ctx=app.state.ctx, settings=settings, app=app)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Browser:
    """One Chromium for the test session; `page()` opens a fresh context with outside hosts blocked."""

    def __init__(self, executable: str) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=executable, headless=True,
                                                args=["--no-sandbox", "--disable-dev-shm-usage"])
        self.blocked: list[str] = []

    def page(self, base_url: str, width: int = 1200, height: int = 900):
        host = urlsplit(base_url).netloc
        ctx = self.browser.new_context(base_url=base_url, viewport={"width": width, "height": height},
                                       accept_downloads=True)

        def gate(route) -> None:
            if urlsplit(route.request.url).netloc == host or route.request.url.startswith(("data:", "blob:")):
                route.continue_()
            else:
                self.blocked.append(route.request.url)
                route.abort()

        ctx.route("**/*", gate)
        page = ctx.new_page()
        page.set_default_timeout(180_000)  # a bound for a loaded machine, not a speed target
        return page

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


def screenshot(page, name: str) -> None:
    """With HERO_SCREENSHOTS set (scripts/screenshots), saves the page as <dir>/<name>.png."""
    out = os.environ.get("HERO_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(out) / f"{name}.png"), full_page=True)


UNMARKED = "An ordinary sentence that nobody watermarked, long enough to be scored by the detector, and more."


def sign_in(page, role: str) -> None:
    """Signs in through the console's development buttons (dev mode, 127.0.0.1 only)."""
    page.goto("/console")
    page.wait_for_selector("body[data-ready='1']")
    page.get_by_role("button", name=f"Sign in as {role}").click()
    page.wait_for_selector("#nav:not([hidden])")


def as_typed(text: str) -> str:
    """`text` as a textarea's value holds it: the HTML spec normalises CR LF and CR to LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def verify(page, text: str):
    """Verifies `text` on the Verify page; returns the result panel."""
    page.get_by_label("Text", exact=True).fill(text)
    page.get_by_role("button", name="Verify", exact=True).click()
    page.wait_for_selector("#verify-result [data-testid=verdict]")
    return page.locator("#verify-result")
