"""Bearer-token verification: EdDSA (Ed25519) or ES256 (P-256) keys only, chosen by `kid`.

Each trusted key carries exactly one algorithm; a token whose header `alg` differs from its key's is
rejected before any signature check, so `none` and HS* (e.g. HMAC keyed with the public key) can never
be accepted. Required claims: exp, iat, iss, aud, sub, jti; leeway <= 60 s; lifetime <= max TTL.
Key sources: a JWKS file (HERO_JWKS_FILE, reloaded when it changes), a JWKS URL (HERO_JWKS_URL,
fetched with httpx by a background thread, cached, with backoff), and the dev key in dev mode. A bad
key is skipped and logged; a bad or unreachable set keeps the last good one; nothing here ever turns a
request into a 500 or stops start-up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from verifier.auth.devkeys import dev_public_jwk

log = logging.getLogger("hero.auth")

REQUIRED_CLAIMS = ("exp", "iat", "iss", "aud", "sub", "jti")
MAX_TOKEN_BYTES = 8192
URL_REFRESH_MIN_SECONDS = 30
VERIFIED_CACHE_MAX = 4096  # tokens whose signature check is remembered (until each one's exp)
FETCH_TIMEOUT_SECONDS = 5.0
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_MAX_SECONDS = 300.0
FETCH_WAITERS_MAX = 4  # requests that may wait at once for a fetch in flight (the others answer without waiting)
_ALLOWED = {("OKP", "Ed25519"): "EdDSA", ("EC", "P-256"): "ES256"}


class AuthError(Exception):
    """Token rejected; the message is safe to return (401)."""


class JwksError(ValueError):
    pass


@dataclass(frozen=True)
class TrustedKey:
    kid: str
    alg: str
    key: Any
    source: str


@dataclass(frozen=True)
class Claims:
    sub: str
    role: str
    jti: str
    raw: dict[str, Any]


def _parse_key(jwk: Any, i: int, source: str) -> TrustedKey:
    if not isinstance(jwk, dict):
        raise JwksError(f"{source}: key {i} is not an object")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid:
        raise JwksError(f"{source}: key {i} has no 'kid'")
    if "d" in jwk:
        raise JwksError(f"{source}: key {kid!r} contains private material; publish public keys only")
    alg = _ALLOWED.get((jwk.get("kty"), jwk.get("crv")))
    if alg is None:
        raise JwksError(f"{source}: key {kid!r}: only Ed25519 (EdDSA) and P-256 (ES256) keys are accepted")
    if jwk.get("alg", alg) != alg:
        raise JwksError(f"{source}: key {kid!r}: alg {jwk.get('alg')!r} does not match its key type ({alg})")
    if jwk.get("use", "sig") != "sig":
        raise JwksError(f"{source}: key {kid!r} is not a signing key")
    try:
        key = jwt.PyJWK(dict(jwk, alg=alg)).key
    except Exception as exc:  # InvalidKeyError, PyJWKError, ValueError...: any malformed key
        raise JwksError(f"{source}: key {kid!r} is malformed ({exc.__class__.__name__})") from None
    return TrustedKey(kid, alg, key, source)


def load_jwks(data: Any, source: str) -> tuple[dict[str, TrustedKey], list[str]]:
    """(usable keys, problems): one bad key is skipped, never fatal for the others."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        return {}, [f"{source}: expected a JWKS object with a 'keys' list"]
    out: dict[str, TrustedKey] = {}
    problems: list[str] = []
    for i, jwk in enumerate(data["keys"]):
        try:
            key = _parse_key(jwk, i, source)
        except JwksError as exc:
            problems.append(str(exc))
            continue
        if key.kid in out:
            problems.append(f"{source}: duplicate kid {key.kid!r}; both copies ignored")
            out.pop(key.kid)
            continue
        out[key.kid] = key
    return out, problems


def parse_jwks(data: Any, source: str) -> dict[str, TrustedKey]:
    """Strict: the whole set or an error (dev key, tests, tooling)."""
    keys, problems = load_jwks(data, source)
    if problems:
        raise JwksError(problems[0])
    return keys


def _http_fetch(url: str) -> Any:
    resp = httpx.get(url, timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False)
    resp.raise_for_status()
    return resp.json()


class KeySource:
    """Thread-safe view over the configured key sources.

    The lock only guards state: no file or network I/O ever happens while it is held. A JWKS URL is
    fetched by one background thread at a time (at start-up, when the cache is stale, or for an unknown
    kid at most every URL_REFRESH_MIN_SECONDS), with exponential backoff after failures, first fetch
    included. A request waits at most HERO_JWKS_WAIT_SECONDS for a fetch in flight, and at most
    FETCH_WAITERS_MAX wait at once (the others answer from the set in hand); a known kid is served
    from the last good set at once, even while a refresh runs or fails. A set with bad keys keeps its
    good keys (each bad one logged); a set with none keeps the previous one.
    """

    def __init__(self, settings, *, fetch: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._waiters = threading.BoundedSemaphore(FETCH_WAITERS_MAX)
        self._file_keys: dict[str, TrustedKey] = {}
        self._file_mtime: float | None = None
        self._url_keys: dict[str, TrustedKey] = {}
        self._url_fetched = 0.0  # monotonic time of the last successful fetch; 0 = never
        self._failures = 0
        self._next_attempt = 0.0
        self._inflight: threading.Event | None = None
        self._fetch = fetch or _http_fetch
        self.wait_seconds = float(getattr(settings, "jwks_wait_seconds", 3.0))
        self._dev_keys: dict[str, TrustedKey] = {}
        if settings.dev_mode:
            self._dev_keys = parse_jwks({"keys": [dev_public_jwk(settings.dev_key_dir)]}, "dev key")
        if settings.jwks_file:
            self._reload_file()
        if settings.jwks_url:
            self._start_fetch(time.monotonic())
        if not (settings.jwks_file or settings.jwks_url or settings.dev_mode):
            log.warning("no JWT keys configured (HERO_JWKS_FILE / HERO_JWKS_URL / HERO_DEV_MODE): every request is 401")

    # -- file ------------------------------------------------------------------------------------
    def _reload_file(self) -> None:
        path = Path(self.settings.jwks_file)
        with self._file_lock:
            try:
                mtime = path.stat().st_mtime
            except OSError:
                if self._file_mtime is None:
                    log.error("JWKS file is not readable; no keys from it until it is", extra={"path": str(path)})
                    self._file_mtime = -1.0
                return
            if mtime == self._file_mtime:
                return
            self._file_mtime = mtime
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                log.error("JWKS file is not valid JSON; keeping the previous key set", extra={"path": str(path)})
                return
            keys, problems = load_jwks(data, str(path))
            for p in problems:
                log.error("JWKS key skipped", extra={"problem": p})
            if keys or not problems:
                self._file_keys = keys
            else:
                log.error("JWKS file has no usable key; keeping the previous key set", extra={"path": str(path)})

    # -- URL -------------------------------------------------------------------------------------
    def _start_fetch(self, now: float) -> threading.Event | None:
        """The fetch in flight (starting one if backoff allows), or None."""
        with self._lock:
            if self._inflight is not None:
                return self._inflight
            if now < self._next_attempt:
                return None
            done = self._inflight = threading.Event()
        threading.Thread(target=self._run_fetch, args=(done,), name="jwks-fetch", daemon=True).start()
        return done

    def _run_fetch(self, done: threading.Event) -> None:
        keys: dict[str, TrustedKey] = {}
        try:
            keys, problems = load_jwks(self._fetch(self.settings.jwks_url), "JWKS URL")
            for p in problems:
                log.error("JWKS key skipped", extra={"problem": p})
            ok = bool(keys)
        except Exception as exc:  # network, HTTP status, JSON: keep the last good set
            log.warning("JWKS URL fetch failed", extra={"error": exc.__class__.__name__})
            ok = False
        with self._lock:
            now = time.monotonic()
            if ok:
                self._url_keys, self._url_fetched, self._failures, self._next_attempt = keys, now, 0, 0.0
            else:
                self._failures += 1
                delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (self._failures - 1))
                self._next_attempt = now + delay * random.uniform(0.5, 1.0)
            self._inflight = None
        done.set()

    def _from_url(self, kid: str) -> TrustedKey | None:
        now = time.monotonic()
        keys = self._url_keys
        never = self._url_fetched == 0.0
        stale = never or now - self._url_fetched > self.settings.jwks_cache_seconds
        if kid in keys and not stale:
            return keys[kid]
        due = stale or now - self._url_fetched >= URL_REFRESH_MIN_SECONDS
        inflight = self._start_fetch(now) if due else None
        if kid in keys:
            return keys[kid]  # stale but known: last good set now, refresh in the background
        # Single flight, bounded waiting: a few requests wait for the fetch (a key the issuer just published);
        # the rest answer at once from the set in hand, so a flood of made-up kids cannot park every worker
        # thread (logins and /readyz share the pool) for HERO_JWKS_WAIT_SECONDS.
        if inflight is not None and self._waiters.acquire(blocking=False):
            try:
                inflight.wait(self.wait_seconds)
            finally:
                self._waiters.release()
        return self._url_keys.get(kid)

    def _local(self, kid: str) -> TrustedKey | None:
        """A dev-mode or JWKS-file key (the file re-read when it changed)."""
        if self.settings.jwks_file:
            self._reload_file()
        for keys in (self._dev_keys, self._file_keys):
            if kid in keys:
                return keys[kid]
        return None

    def peek(self, kid: str) -> TrustedKey | None:
        """The key now trusted under `kid`, never waiting for a fetch (a stale URL set answers None: the caller
        then takes the full path, which refreshes it). Safe on the event loop: at most a stat of the JWKS file."""
        key = self._local(kid)
        if key is not None or not self.settings.jwks_url:
            return key
        fresh = self._url_fetched and time.monotonic() - self._url_fetched <= self.settings.jwks_cache_seconds
        return self._url_keys.get(kid) if fresh else None

    def get(self, kid: str) -> TrustedKey | None:
        key = self._local(kid)
        if key is None and self.settings.jwks_url:
            return self._from_url(kid)
        return key


@dataclass(frozen=True)
class _Verified:
    claims: Claims
    key: TrustedKey  # the key that checked the signature: the entry holds only while it is still trusted
    exp: float


class TokenVerifier:
    """Checks bearer tokens; a token that passed every check is remembered (by its SHA-256) until its `exp`.

    Why: an Ed25519 signature check costs ~50 us of CPU, per request, for the same token a client sends again
    and again. A remembered token is only accepted while the very key object that verified its signature is
    still the one trusted under its `kid` (a key removed from the JWKS or replaced ends it at once) and while
    `exp` (with the same leeway) has not passed; failures are never remembered. Settings (issuer, audience,
    role claim, lifetime cap) are fixed for the verifier's life, so the other checks' outcome cannot change.
    """

    def __init__(self, settings, keys: KeySource | None = None, *, cache_max: int = VERIFIED_CACHE_MAX,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.keys = keys or KeySource(settings)
        self.cache_max = cache_max
        self.clock = clock
        self._verified: dict[bytes, _Verified] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TokenVerifier(remembered={len(self._verified)})"

    def _leeway(self) -> int:
        return min(int(self.settings.jwt_leeway_seconds), 60)

    def cached(self, token: str) -> Claims | None:
        """The claims of a token verified before and still valid, else None. Never blocks (no fetch, no
        signature check): cheap enough for the event loop."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            return None
        digest = hashlib.sha256(token.encode()).digest()
        hit = self._verified.get(digest)
        if hit is None:
            return None
        if hit.exp <= self.clock() - self._leeway() or self.keys.peek(hit.key.kid) is not hit.key:
            with self._lock:
                self._verified.pop(digest, None)
            return None
        return hit.claims

    def _remember(self, token: str, claims: Claims, key: TrustedKey) -> None:
        if self.cache_max <= 0:
            return
        entry = _Verified(claims, key, float(claims.raw["exp"]))
        with self._lock:
            if len(self._verified) >= self.cache_max:
                now = self.clock() - self._leeway()
                self._verified = {k: v for k, v in self._verified.items() if v.exp > now}
                while len(self._verified) >= self.cache_max:  # the oldest first (insertion order)
                    del self._verified[next(iter(self._verified))]
            self._verified[hashlib.sha256(token.encode()).digest()] = entry

    def verify(self, token: str) -> Claims:
        hit = self.cached(token)
        if hit is not None:
            return hit
        claims, key = self._verify(token)
        self._remember(token, claims, key)
        return claims

    def _verify(self, token: str) -> tuple[Claims, TrustedKey]:
        s = self.settings
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError("malformed token") from None
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthError("token has no key id (kid)")
        try:
            key = self.keys.get(kid)
        except Exception as exc:  # a key source must never turn a request into a 500
            log.error("key lookup failed", extra={"error": exc.__class__.__name__})
            key = None
        if key is None:
            raise AuthError("unknown key id")
        if header.get("alg") != key.alg:
            raise AuthError("token algorithm not allowed for this key")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.alg],
                audience=s.jwt_audience,
                issuer=s.jwt_issuer,
                leeway=self._leeway(),
                options={"require": list(REQUIRED_CLAIMS), "verify_signature": True, "strict_aud": False},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired") from None
        except jwt.ImmatureSignatureError:
            raise AuthError("token not yet valid") from None
        except jwt.InvalidAudienceError:
            raise AuthError("token audience not accepted") from None
        except jwt.InvalidIssuerError:
            raise AuthError("token issuer not accepted") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token lacks required claim {exc.claim!r}") from None
        except jwt.InvalidSignatureError:
            raise AuthError("token signature invalid") from None
        except jwt.PyJWTError:
            raise AuthError("invalid token") from None
        except Exception as exc:  # e.g. a key object the backend rejects at verify time
            log.error("token verification failed", extra={"error": exc.__class__.__name__})
            raise AuthError("invalid token") from None
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or not isinstance(iat, int | float):
            raise AuthError("invalid token")
        if exp - iat > s.jwt_max_ttl_seconds:
            raise AuthError("token lifetime exceeds the allowed maximum")
        sub, jti, role = claims.get("sub"), claims.get("jti"), claims.get(s.jwt_role_claim)
        for name, value in (("sub", sub), ("jti", jti)):
            if not isinstance(value, str) or not value or len(value) > 256:
                raise AuthError(f"token claim {name!r} must be a non-empty string")
        if not isinstance(role, str) or not role:
            raise AuthError(f"token lacks a {s.jwt_role_claim!r} claim")
        return Claims(sub=sub, role=role, jti=jti, raw=claims), key  # type: ignore[arg-type]
