"""Keeping a provider's bundle current: fetch over HTTP with `If-None-Match`, in a background thread.

A fleet polls `POST /v1/keys/generation-bundle` every `interval_s`; an unchanged key set answers 304 (no
key material moves), a rotation answers 200 with a new ETag and the new bundle is opened and swapped in
atomically. Near expiry the poll skips `If-None-Match`, so a fresh bundle replaces the old one in time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from verifier.provider.bundle import BundleError, GenerationBundle, open_bundle

log = logging.getLogger("hero.provider")

BUNDLE_PATH = "/v1/keys/generation-bundle"


class BundleFetchError(RuntimeError):
    """The service refused or failed to hand out a bundle (status code in `status`)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"bundle request failed with HTTP {status}: {detail}")
        self.status = status


class BundleSource:
    """The provider's current bundle, refreshed from the verifier service.

    `token` is the provider's JWT (role `provider`, sub = provider id), or a callable returning a fresh one.
    `client` is any `httpx.Client` (base URL set); pass `base_url` instead to let the source make one.
    """

    def __init__(
        self,
        private_key: bytes,
        token: str | Callable[[], str],
        *,
        base_url: str | None = None,
        client: httpx.Client | None = None,
        profile: str | None = None,
        interval_s: float = 60.0,
        refresh_margin: timedelta = timedelta(minutes=10),
        timeout_s: float = 10.0,
        on_change: Callable[[GenerationBundle], None] | None = None,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("give base_url or client")
            client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self._client = client
        self._private_key = private_key
        self._token = token
        self._profile = profile
        self.interval_s = interval_s
        self.refresh_margin = refresh_margin
        self._on_change = on_change
        self._lock = threading.Lock()
        self._bundle: GenerationBundle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None
        self.polls = 0
        self.not_modified = 0

    def __repr__(self) -> str:
        return f"BundleSource(bundle={self._bundle!r})"

    @property
    def bundle(self) -> GenerationBundle:
        """The current bundle (fetching the first one if needed)."""
        with self._lock:
            current = self._bundle
        if current is None:
            self.refresh()
            with self._lock:
                current = self._bundle
        assert current is not None
        return current

    def _auth(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        return {"Authorization": f"Bearer {token}"}

    def refresh(self) -> bool:
        """One poll; True when a new bundle was installed. Raises BundleFetchError / BundleError."""
        with self._lock:
            current = self._bundle
        headers = self._auth()
        near_expiry = current is not None and current.expires_at - self.refresh_margin <= datetime.now(UTC)
        if current is not None and not near_expiry:
            headers["If-None-Match"] = f'"{current.etag}"'
        body: dict[str, Any] = {"profile": self._profile} if self._profile else {}
        self.polls += 1
        resp = self._client.post(BUNDLE_PATH, headers=headers, json=body)
        if resp.status_code == 304:
            self.not_modified += 1
            return False
        if resp.status_code != 200:
            try:
                detail = str(resp.json().get("detail", ""))
            except ValueError:
                detail = ""
            raise BundleFetchError(resp.status_code, detail[:200])
        new = open_bundle(resp.json()["bundle"], self._private_key)
        with self._lock:
            self._bundle = new
        log.info("generation bundle installed", extra={"bundle_id": new.bundle_id, "versions": new.key_versions})
        if self._on_change is not None:
            self._on_change(new)
        return True

    # -- background refresh ---------------------------------------------------------------------
    def start(self) -> BundleSource:
        """Poll every `interval_s` in a daemon thread (the first bundle is fetched now, in this thread)."""
        self.bundle  # noqa: B018  (fail fast: no key, no thread)
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="hero-bundle-refresh", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
                self.last_error = None
            except (BundleFetchError, BundleError, httpx.HTTPError) as exc:
                # The old bundle stays in use until it expires; only the error type is logged.
                self.last_error = exc
                log.warning("bundle refresh failed", extra={"error": exc.__class__.__name__})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def wait_for_change(self, etag: str, timeout_s: float) -> GenerationBundle | None:
        """Block until the current bundle's ETag differs from `etag` (tests, runbooks)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                b = self._bundle
            if b is not None and b.etag != etag:
                return b
            time.sleep(0.05)
        return None

    def __enter__(self) -> BundleSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
