"""Bearer-token verification: EdDSA (Ed25519), ES256 (P-256), ES384 (P-384), RS256 or PS256 (RSA >= 2048 bits)
keys, chosen by `kid`.

Each trusted key carries exactly one algorithm (an RSA key: its JWK's `alg`, RS256 when absent, as Entra ID
publishes them); a token whose header `alg` differs from its key's is rejected before any signature check, so
`none` and HS* (e.g. HMAC keyed with the public key) can never be accepted. Required claims: exp, iat, iss, aud,
sub, jti (an OIDC issuer's token without `jti`, e.g. Entra's or Google's, gets one derived from the token's
SHA-256); leeway <= 60 s; lifetime <= max TTL.
Key sources: a JWKS file (HERO_JWKS_FILE, reloaded when it changes), a JWKS URL (HERO_JWKS_URL,
fetched with httpx by a background thread, cached, with backoff), and the dev key in dev mode, all for the
issuer HERO_JWT_ISSUER; and per OpenID Connect issuer (HERO_OIDC_ISSUER, several allowed) the keys of its
discovery document's `jwks_uri` (discovery and JWKS fetched together, cached and backed off as the JWKS URL). A
token is checked only with the keys of the issuer its `iss` names: one issuer's key never vouches for another's
tokens. A bad key is skipped and logged; a bad or unreachable set keeps the last good one; nothing here ever turns
a request into a 500 or stops start-up.

Roles: HERO_JWT_ROLE_CLAIM is a claim name (`role`, or a namespaced URL such as `https://example.com/roles`, read
at the top level), else a dotted path (`realm_access.roles`) read in nested objects only (a literal top-level claim
named `realm_access.roles` is never read: the IdP manages the nested value, a client may add top-level claims); its
value a string or a list of strings, mapped to HeRo roles by HERO_ROLE_MAP when set. `Claims.roles` holds every
HeRo role found; the server policy decides what several of them mean (`Policy.resolve`).

Per issuer (HERO_OIDC_ISSUERS, `verifier.base.settings.OidcIssuer`): each OIDC issuer its own audience (in `aud`, or in
`client_id` for AWS Cognito's access tokens, which carry no `aud`), role claim and role map, so a group of issuer
B never means what the operator meant for issuer A's group of the same name. HERO_JWT_ISSUER and the issuers of
HERO_OIDC_ISSUER keep the single HERO_JWT_AUDIENCE / HERO_JWT_ROLE_CLAIM / HERO_ROLE_MAP.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
_ALLOWED = {("OKP", "Ed25519"): "EdDSA", ("EC", "P-256"): "ES256", ("EC", "P-384"): "ES384"}
RSA_ALGS = ("RS256", "PS256")  # an RSA key's JWK names one of these (RS256 when it names none)
RSA_MIN_BITS = 2048
MAX_ROLE_VALUES = 64  # a role claim holding more values than this is refused (401)
DISCOVERY_PATH = "/.well-known/openid-configuration"


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
    role: str  # the one HeRo role when the token maps to exactly one, else "" (see `roles`)
    jti: str
    raw: dict[str, Any]
    roles: tuple[str, ...] = field(default=())  # every HeRo role the token maps to (policy.resolve picks or refuses)

    def __post_init__(self) -> None:
        if not self.roles and self.role:
            object.__setattr__(self, "roles", (self.role,))


def _parse_key(jwk: Any, i: int, source: str) -> TrustedKey:
    if not isinstance(jwk, dict):
        raise JwksError(f"{source}: key {i} is not an object")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid:
        raise JwksError(f"{source}: key {i} has no 'kid'")
    if "d" in jwk:
        raise JwksError(f"{source}: key {kid!r} contains private material; publish public keys only")
    if jwk.get("kty") == "RSA":
        alg = jwk.get("alg", "RS256")
        if alg not in RSA_ALGS:
            raise JwksError(f"{source}: key {kid!r}: an RSA key must be RS256 or PS256, not {str(alg)[:16]!r}")
    else:
        alg = _ALLOWED.get((jwk.get("kty"), jwk.get("crv")))
    if alg is None:
        raise JwksError(f"{source}: key {kid!r}: only Ed25519 (EdDSA), P-256 (ES256), P-384 (ES384) and RSA "
                        "(RS256, PS256) keys are accepted")
    if jwk.get("alg", alg) != alg:
        raise JwksError(f"{source}: key {kid!r}: alg {jwk.get('alg')!r} does not match its key type ({alg})")
    if jwk.get("use", "sig") != "sig":
        raise JwksError(f"{source}: key {kid!r} is not a signing key")
    try:
        key = jwt.PyJWK(dict(jwk, alg=alg)).key
    except Exception as exc:  # InvalidKeyError, PyJWKError, ValueError...: any malformed key
        raise JwksError(f"{source}: key {kid!r} is malformed ({exc.__class__.__name__})") from None
    if alg in RSA_ALGS and getattr(key, "key_size", 0) < RSA_MIN_BITS:
        raise JwksError(f"{source}: key {kid!r}: RSA keys need at least {RSA_MIN_BITS} bits")
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


def _same_origin_rules(issuer: str, url: str) -> bool:
    """A `jwks_uri` is https, or http only when the issuer itself is an http loopback (a local test IdP)."""
    u, i = urlsplit(url), urlsplit(issuer)
    if u.scheme == "https" and u.hostname:
        return True
    return u.scheme == "http" and i.scheme == "http" and u.hostname == i.hostname and \
        i.hostname in ("localhost", "127.0.0.1", "::1")


def oidc_jwks_fetcher(fetch: Callable[[str], Any] = _http_fetch) -> Callable[[str], Any]:
    """issuer -> its JWKS: the discovery document `<issuer>/.well-known/openid-configuration` (whose `issuer` must
    be exactly the configured one, OIDC Discovery 4.3), then its `jwks_uri`. Both are fetched on every refresh of
    the set, so a moved `jwks_uri` is followed as a rotated key is."""

    def fetch_issuer(issuer: str) -> Any:
        doc = fetch(issuer.rstrip("/") + DISCOVERY_PATH)
        if not isinstance(doc, dict) or doc.get("issuer") != issuer:
            raise JwksError("OIDC discovery document names another issuer")
        uri = doc.get("jwks_uri")
        if not isinstance(uri, str) or not _same_origin_rules(issuer, uri):
            raise JwksError("OIDC discovery document has no usable https jwks_uri")
        return fetch(uri)

    return fetch_issuer


@dataclass(frozen=True)
class _IssuerSettings:
    """What a KeySource reads, for one OIDC issuer: its keys come from discovery, never a file or the dev key."""

    jwks_url: str
    jwks_cache_seconds: int
    jwks_wait_seconds: float
    jwks_file: None = None
    dev_mode: bool = False


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
        if not (settings.jwks_file or settings.jwks_url or settings.dev_mode or getattr(settings, "oidc_issuer", ())):
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

    def sole(self, alg: str) -> TrustedKey | None:
        """The set's one key of `alg`, or None when it has none or several (a token without `kid`: some IdPs sign
        with a single key and name none; with two candidates nothing is guessed)."""
        if self.settings.jwks_url:
            self._from_url("\x00")  # no such kid: refreshes a stale or never-fetched set (bounded wait)
        found = [k for k in (*self._dev_keys.values(), *self._file_keys.values(), *self._url_keys.values())
                 if k.alg == alg]
        return found[0] if len(found) == 1 else None

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
    keys: KeySource  # the source (HERO_JWT_ISSUER's, or one OIDC issuer's) that trusted it


@dataclass(frozen=True)
class IssuerRules:
    """What one issuer's tokens must carry and mean: accepted audiences (in `audience_claim`), the role claim and
    the role map."""

    audiences: tuple[str, ...]
    audience_claim: str
    role_claim: str
    role_map: dict[str, str]


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """The claim `path`: a name without dots, or a namespaced URL (`https://example.com/roles`: it has a `/`), at
    the top level; else a dotted path read in nested objects only (`realm_access.roles`: a top-level claim of that
    literal name is ignored); None when absent."""
    if "/" in path or "." not in path:
        return claims.get(path)
    cur: Any = claims
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def mapped_roles(value: Any, claim: str, role_map: dict[str, str]) -> tuple[str, ...]:
    """The HeRo roles a role claim names: its string or list of strings, through `role_map` when one is set (only
    mapped values count; unmapped ones are ignored), in first-seen order, each once. Raises AuthError (401) on a
    missing or malformed claim; an empty result (nothing mapped) is the policy's to refuse (403)."""
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or len(values) > MAX_ROLE_VALUES or \
            not all(isinstance(v, str) and v and len(v) <= 256 for v in values):
        raise AuthError(f"token lacks a {claim[:64]!r} claim (a role string or a list of them)")
    roles = [role_map[v] for v in values if v in role_map] if role_map else values
    return tuple(dict.fromkeys(roles))


class TokenVerifier:
    """Checks bearer tokens; a token that passed every check is remembered (by its SHA-256) until its `exp`.

    Why: an Ed25519 signature check costs ~50 us of CPU, per request, for the same token a client sends again
    and again. A remembered token is only accepted while the very key object that verified its signature is
    still the one trusted under its `kid` (a key removed from the JWKS or replaced ends it at once) and while
    `exp` (with the same leeway) has not passed; failures are never remembered. Settings (issuer, audience,
    role claim, lifetime cap) are fixed for the verifier's life, so the other checks' outcome cannot change.
    """

    def __init__(self, settings, keys: KeySource | None = None, *, cache_max: int = VERIFIED_CACHE_MAX,
                 clock: Callable[[], float] = time.time, fetch: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        self.keys = keys or KeySource(settings)
        # one key source per OIDC issuer: discovery -> jwks_uri, cached and refreshed as HERO_JWKS_URL is
        shared = IssuerRules((settings.jwt_audience,), "aud", settings.jwt_role_claim,
                             dict(getattr(settings, "role_map", {}) or {}))
        self.rules: dict[str, IssuerRules] = {settings.jwt_issuer: shared}
        for iss in getattr(settings, "oidc_issuer", ()):
            self.rules[iss] = shared
        for conf in getattr(settings, "oidc_issuers", ()):
            self.rules[conf.issuer] = IssuerRules(tuple(conf.audience), conf.audience_claim, conf.role_claim,
                                                  dict(conf.role_map))
        self.issuers: dict[str, KeySource] = {
            iss: KeySource(_IssuerSettings(iss, settings.jwks_cache_seconds, settings.jwks_wait_seconds),
                           fetch=oidc_jwks_fetcher(fetch or _http_fetch))
            for iss in [*getattr(settings, "oidc_issuer", ()),
                        *(c.issuer for c in getattr(settings, "oidc_issuers", ()))]
        }
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
        if hit.exp <= self.clock() - self._leeway() or hit.keys.peek(hit.key.kid) is not hit.key:
            with self._lock:
                self._verified.pop(digest, None)
            return None
        return hit.claims

    def _remember(self, token: str, claims: Claims, key: TrustedKey, keys: KeySource) -> None:
        if self.cache_max <= 0:
            return
        entry = _Verified(claims, key, float(claims.raw["exp"]), keys)
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
        claims, key, keys = self._verify(token)
        self._remember(token, claims, key, keys)
        return claims

    def _verify(self, token: str) -> tuple[Claims, TrustedKey, KeySource]:
        s = self.settings
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("malformed token")
        try:
            header = jwt.get_unverified_header(token)
            named = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            raise AuthError("malformed token") from None
        kid = header.get("kid")
        # the issuer the token names picks the only keys that may vouch for it (unverified until the signature is)
        oidc = isinstance(named, str) and named in self.issuers
        if not oidc and named != s.jwt_issuer:
            raise AuthError("token issuer not accepted")
        source = self.issuers[named] if oidc else self.keys
        issuer = named if oidc else s.jwt_issuer
        rules = self.rules[issuer]
        in_aud = rules.audience_claim == "aud"
        required = [c for c in REQUIRED_CLAIMS if not (oidc and c == "jti") and (in_aud or c != "aud")]
        if kid is None and oidc and isinstance(header.get("alg"), str):
            kid = ""  # an OIDC issuer's token without kid: its issuer's single key of that alg, if it has one
        elif not isinstance(kid, str) or not kid:
            raise AuthError("token has no key id (kid)")
        try:
            key = source.get(kid) if kid else source.sole(header["alg"])
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
                audience=list(rules.audiences) if in_aud else None,
                issuer=issuer,
                leeway=self._leeway(),
                options={"require": required, "verify_signature": True, "strict_aud": False, "verify_aud": in_aud},
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
        if not in_aud and claims.get(rules.audience_claim) not in rules.audiences:  # e.g. Cognito's client_id
            raise AuthError("token audience not accepted")
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or not isinstance(iat, int | float):
            raise AuthError("invalid token")
        if exp - iat > s.jwt_max_ttl_seconds:
            raise AuthError("token lifetime exceeds the allowed maximum")
        sub, jti = claims.get("sub"), claims.get("jti")
        if oidc and "jti" not in claims:  # Entra (`uti`), Google: no jti; the token's own digest names it
            jti = "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:32]
        for name, value in (("sub", sub), ("jti", jti)):
            if not isinstance(value, str) or not value or len(value) > 256:
                raise AuthError(f"token claim {name!r} must be a non-empty string")
        roles = mapped_roles(claim_at(claims, rules.role_claim), rules.role_claim, rules.role_map)
        return (Claims(sub=sub, role=roles[0] if len(roles) == 1 else "", jti=jti, raw=claims,  # type: ignore[arg-type]
                       roles=roles), key, source)
