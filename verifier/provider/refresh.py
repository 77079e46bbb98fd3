"""Keeping a provider's bundle current: fetch over HTTP with `If-None-Match`, in a background thread.

A fleet polls `POST /v1/keys/generation-bundle` every `interval_s`; an unchanged key set answers 304 (no
key material moves), a rotation answers 200 with a new ETag and the new bundle is opened and swapped in
atomically. Near expiry the poll skips `If-None-Match`, so a fresh bundle replaces the old one in time.
Every bundle must carry the signature of the pinned service key and name this provider (`open_bundle`):
whoever sits between the fleet and the service (a proxy, a rewritten response) cannot swap its keys.
Bundles never go back: one issued before the newest this source has installed, or naming an older key version
of any level, is refused and logged (a replayed signed bundle rolled a provider back to a disabled `l1-v1`:
issue 52, N7); the bundle in force stays.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from verifier.provider.bundle import BundleError, GenerationBundle, ServiceKey, open_bundle, service_keys

log = logging.getLogger("hero.provider")

BUNDLE_PATH = "/v1/keys/generation-bundle"


class BundleRefused(BundleError):
    """A fetched bundle this process will not use (`BundleSource(accept=...)` said why: a serving engine's state was
    built for another profile shape); the bundle in force stays until it expires."""


class BundleFetchError(RuntimeError):
    """The service refused or failed to hand out a bundle (status code in `status`)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"bundle request failed with HTTP {status}: {detail}")
        self.status = status


class BundleSource:
    """The provider's current bundle, refreshed from the verifier service.

    `token` is the provider's JWT (role `provider`, sub = provider id), or a callable returning a fresh one.
    `service_key` is the service's pinned verifier key (`GET /v1/audit/public-key`, `hero audit public-key`; see
    `bundle.service_keys`); `provider_id` this provider's registered id (default: the `sub` of its own token).
    `client` is any `httpx.Client` (base URL set); pass `base_url` instead to let the source make one.
    `allow_unsigned=True` also accepts the unsigned `hero-bundle-2` / `-1` of a service that does not sign yet.
    `accept(bundle)`: None to install a fetched (opened, signature-checked) bundle, else why not: the bundle is
    refused (one warning line per refused bundle), the current one stays in use until it expires, and later polls
    send the refused bundle's ETag, so the service answers 304 until it has another (`verifier/provider/step.py`
    `BundleKeys` refuses a rotation that changes the profile's shape this way).
    """

    def __init__(
        self,
        private_key: bytes,
        token: str | Callable[[], str],
        *,
        service_key: ServiceKey | None,
        provider_id: str | None = None,
        allow_unsigned: bool = False,
        base_url: str | None = None,
        client: httpx.Client | None = None,
        profile: str | None = None,
        interval_s: float = 60.0,
        refresh_margin: timedelta = timedelta(minutes=10),
        timeout_s: float = 10.0,
        on_change: Callable[[GenerationBundle], None] | None = None,
        accept: Callable[[GenerationBundle], str | None] | None = None,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("give base_url or client")
            client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self._service_key = service_keys(service_key) if service_key is not None else None
        if self._service_key is None and not allow_unsigned:
            raise BundleError("service_key is required: pin the service's key (GET /v1/audit/public-key)")
        self._provider_id = provider_id
        self._allow_unsigned = allow_unsigned
        self._client = client
        self._private_key = private_key
        self._token = token
        self._profile = profile
        self.interval_s = interval_s
        self.refresh_margin = refresh_margin
        self._on_change = on_change
        self._accept = accept
        self.refused: str | None = None  # why the service's latest bundle was refused (None: none was)
        self._refused_etag: str | None = None
        self._lock = threading.Lock()
        self._bundle: GenerationBundle | None = None
        # the newest bundle ever installed here (issued_at, each level's version number): none older is taken
        self._newest: tuple[datetime, dict[int, int]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None
        self.polls = 0
        self.not_modified = 0

    def __repr__(self) -> str:
        return f"BundleSource(bundle={self._bundle!r})"

    @property
    def bundle(self) -> GenerationBundle:
        """The current bundle (fetching the first one, or a fresh one for an expired one, if needed);
        BundleExpired when the only bundle there is has expired."""
        with self._lock:
            current = self._bundle
        if current is None or current.expired():
            try:
                self.refresh()
            except Exception:
                if current is None:
                    raise
            with self._lock:
                current = self._bundle
        if current is None:  # the one fetched was refused (`accept`)
            raise BundleRefused(f"no usable bundle: {self.refused}")
        current.require_fresh()
        return current

    @property
    def current(self) -> GenerationBundle | None:
        """The bundle installed so far, never fetching (None before the first successful poll): for callers on a
        hot path, which must not wait on the service."""
        with self._lock:
            return self._bundle

    def _auth(self) -> tuple[dict[str, str], str]:
        """(headers, this provider's id): the id given, else the `sub` of the provider's own token."""
        token = self._token() if callable(self._token) else self._token
        return {"Authorization": f"Bearer {token}"}, self._provider_id or token_subject(token)

    def refresh(self) -> bool:
        """One poll; True when a new bundle was installed. Raises BundleFetchError / BundleError."""
        with self._lock:
            current = self._bundle
        headers, provider_id = self._auth()
        near_expiry = current is not None and current.expires_at - self.refresh_margin <= datetime.now(UTC)
        if (current is not None and not near_expiry) or self._refused_etag is not None:
            # the refused one's ETag when the service's latest was refused: 304 until it has another
            headers["If-None-Match"] = f'"{self._refused_etag or current.etag}"'
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
        try:
            sealed = resp.json()["bundle"]
        except (ValueError, KeyError, TypeError):
            raise BundleError("bundle response is not the expected JSON") from None
        new = open_bundle(sealed, self._private_key, service_key=self._service_key, provider_id=provider_id,
                          allow_unsigned=self._allow_unsigned)
        reason = self._older(new)
        if reason is None and self._accept is not None:
            reason = self._accept(new)
        if reason is not None:
            self._refuse(new, current, reason)
            return False
        with self._lock:
            self._bundle = new
            self.refused = self._refused_etag = None
            self._newest = _high_water(self._newest, new)
        log.info("generation bundle installed", extra={"bundle_id": new.bundle_id, "versions": new.key_versions})
        if self._on_change is not None:
            self._on_change(new)
        return True

    def _older(self, new: GenerationBundle) -> str | None:
        """Why `new` goes back from the newest bundle installed here (issued earlier, or an older version of a
        level), or None."""
        if self._newest is None:
            return None
        issued, versions = self._newest
        if new.issued_at < issued:
            return (f"issued at {new.issued_at.isoformat()}, before the newest bundle installed here "
                    f"({issued.isoformat()}): a bundle never goes back")
        for level, name in sorted(new.key_versions.items()):
            n = version_number(name)
            if level in versions and (n is None or n < versions[level]):
                return (f"level {level} version {name!r} is older than version {versions[level]} installed here: "
                        "a bundle never goes back")
        return None

    def _refuse(self, new: GenerationBundle, current: GenerationBundle | None, reason: str) -> None:
        """Keep `current` (one warning line per refused bundle, naming the reason and what stays in use)."""
        first = new.etag != self._refused_etag
        self.refused, self._refused_etag = f"bundle {new.bundle_id} refused: {reason}", new.etag
        if first:
            keeps = (f"bundle {current.bundle_id} stays in use until it expires at {current.expires_at.isoformat()}"
                     if current is not None else "the bundle this process started with stays in use until it expires")
            log.warning("%s; %s", self.refused, keeps)

    # -- background refresh ---------------------------------------------------------------------
    def start(self, fetch_first: bool = True) -> BundleSource:
        """Poll every `interval_s` in a daemon thread (the first bundle is fetched now, in this thread, unless
        `fetch_first=False`: a caller with a fallback bundle starts polling without waiting on the service)."""
        if fetch_first:
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


def version_number(name: str) -> int | None:
    """The number of a key version name (`l1-v3` -> 3), None for a name the service does not make."""
    _, sep, n = name.rpartition("-v")
    return int(n) if sep and n.isascii() and n.isdigit() else None


def _high_water(prev: tuple[datetime, dict[int, int]] | None,
                new: GenerationBundle) -> tuple[datetime, dict[int, int]]:
    issued = new.issued_at if prev is None else max(prev[0], new.issued_at)
    versions = dict(prev[1]) if prev is not None else {}
    for level, name in new.key_versions.items():
        n = version_number(name)
        if n is not None:
            versions[level] = max(versions.get(level, n), n)
    return issued, versions


def token_subject(token: str) -> str:
    """The `sub` of the provider's own JWT (read, not verified: the service checks the token; here it only names
    which provider the bundle must be for)."""
    try:
        payload = token.split(".")[1]
        sub = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("sub")
    except (IndexError, ValueError, AttributeError, binascii.Error):
        sub = None
    if not isinstance(sub, str) or not sub:
        raise BundleError("provider_id not given and the token has no 'sub': pass provider_id=")
    return sub
