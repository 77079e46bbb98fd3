"""Bearer-token verification: EdDSA (Ed25519) or ES256 (P-256) keys only, chosen by `kid`.

Each trusted key carries exactly one algorithm; a token whose header `alg` differs from its key's is
rejected before any signature check, so `none` and HS* (e.g. HMAC keyed with the public key) can never
be accepted. Required claims: exp, iat, iss, aud, sub, jti; leeway <= 60 s; lifetime <= max TTL.
Key sources: a JWKS file (HERO_JWKS_FILE, reloaded when it changes), a JWKS URL (HERO_JWKS_URL,
fetched with httpx from worker threads, cached), and the dev key in dev mode.
"""

from __future__ import annotations

import json
import logging
import threading
import time
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


def parse_jwks(data: Any, source: str) -> dict[str, TrustedKey]:
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise JwksError(f"{source}: expected a JWKS object with a 'keys' list")
    out: dict[str, TrustedKey] = {}
    for i, jwk in enumerate(data["keys"]):
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
        if kid in out:
            raise JwksError(f"{source}: duplicate kid {kid!r}")
        try:
            key = jwt.PyJWK(dict(jwk, alg=alg)).key
        except jwt.PyJWKError as exc:
            raise JwksError(f"{source}: key {kid!r} is malformed ({exc.__class__.__name__})") from None
        out[kid] = TrustedKey(kid, alg, key, source)
    return out


class KeySource:
    """Thread-safe view over the configured key sources."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._file_keys: dict[str, TrustedKey] = {}
        self._file_mtime: float | None = None
        self._url_keys: dict[str, TrustedKey] = {}
        self._url_fetched = 0.0
        self._url_attempted = 0.0
        self._dev_keys: dict[str, TrustedKey] = {}
        if settings.dev_mode:
            self._dev_keys = parse_jwks({"keys": [dev_public_jwk(settings.dev_key_dir)]}, "dev key")
        if settings.jwks_file:
            self._reload_file(force=True)
        if not (settings.jwks_file or settings.jwks_url or settings.dev_mode):
            log.warning("no JWT keys configured (HERO_JWKS_FILE / HERO_JWKS_URL / HERO_DEV_MODE): every request is 401")

    def _reload_file(self, force: bool = False) -> None:
        path = Path(self.settings.jwks_file)
        try:
            mtime = path.stat().st_mtime
        except OSError:
            if force:
                raise JwksError(f"cannot read JWKS file {path}") from None
            return
        if not force and mtime == self._file_mtime:
            return
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            raise JwksError(f"JWKS file {path} is not valid JSON") from None
        self._file_keys = parse_jwks(data, str(path))
        self._file_mtime = mtime

    def _fetch_url(self) -> None:
        now = time.monotonic()
        if now - self._url_attempted < URL_REFRESH_MIN_SECONDS and self._url_fetched:
            return
        self._url_attempted = now
        try:
            resp = httpx.get(self.settings.jwks_url, timeout=5.0, follow_redirects=False)
            resp.raise_for_status()
            self._url_keys = parse_jwks(resp.json(), "JWKS URL")
            self._url_fetched = now
        except (httpx.HTTPError, ValueError, JwksError) as exc:
            log.warning("JWKS URL fetch failed", extra={"error": exc.__class__.__name__})

    def get(self, kid: str) -> TrustedKey | None:
        with self._lock:
            if self.settings.jwks_file:
                try:
                    self._reload_file()
                except JwksError:
                    log.warning("JWKS file reload failed; keeping the previous key set")
            for keys in (self._dev_keys, self._file_keys):
                if kid in keys:
                    return keys[kid]
            if self.settings.jwks_url:
                stale = time.monotonic() - self._url_fetched > self.settings.jwks_cache_seconds
                if stale or kid not in self._url_keys:
                    self._fetch_url()  # blocking: callers run in worker threads, never on the event loop
                return self._url_keys.get(kid)
        return None


class TokenVerifier:
    def __init__(self, settings, keys: KeySource | None = None) -> None:
        self.settings = settings
        self.keys = keys or KeySource(settings)

    def verify(self, token: str) -> Claims:
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
        key = self.keys.get(kid)
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
                leeway=min(int(s.jwt_leeway_seconds), 60),
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
        return Claims(sub=sub, role=role, jti=jti, raw=claims)  # type: ignore[arg-type]
