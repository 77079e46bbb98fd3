"""The console's browser tests share their fixtures: Debian's chromium driven by Playwright (one per module), a
live server with three generated texts (a module may define its own `live`), and a check, for every test that
drives the browser, that no request went to another host."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.helpers.browser import Browser, live_server, require_browser
from tests.helpers.service import make_settings
from tests.helpers.workers import make_texts


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser(require_browser())
    yield b
    b.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory, browser):
    home = tmp_path_factory.mktemp("console-home")
    settings = make_settings(home, f"sqlite:///{home / 'service.db'}", log_level="WARNING")
    with live_server(settings) as srv:
        from verifier.audit.service import Actor

        srv.ctx.store.initialize(srv.ctx.profile, Actor("setup", "cli", "setup"))
        srv.texts = make_texts(SimpleNamespace(ctx=srv.ctx), 3, steps=200, seed=3)
        yield srv


@pytest.fixture(autouse=True)
def no_outside_requests(request):
    """Fails a browser test whose pages asked another host for anything (the console needs no network)."""
    if "browser" not in request.fixturenames:
        yield
        return
    browser = request.getfixturevalue("browser")
    browser.blocked.clear()
    yield
    assert browser.blocked == [], f"requests to other hosts: {browser.blocked}"
