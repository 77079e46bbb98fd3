"""The console's browser tests share one fixture: Debian's chromium driven by Playwright, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.browser import Browser, require_browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser(require_browser())
    yield b
    b.close()
