"""Dev-mode signing key (Ed25519) under $HERO_HOME/dev-jwt and `hero token` minting.

Only used when HERO_DEV_MODE=1: the key's public half is then added to the accepted key set.
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.base.secretfile import write_secret

KEY_FILE = "signing-key.pem"


class DevModeError(RuntimeError):
    pass


def _b64u(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _load_or_create(directory: Path) -> Ed25519PrivateKey:
    path = directory / KEY_FILE
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        write_secret(path, pem, replace=False)  # never replace a key another process created meanwhile
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise DevModeError(f"{path} is not an Ed25519 key")
    return key


def dev_public_jwk(directory: Path) -> dict[str, str]:
    pub = _load_or_create(directory).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    kid = "hero-dev-" + hashlib.sha256(pub).hexdigest()[:16]
    return {"kty": "OKP", "crv": "Ed25519", "x": _b64u(pub), "kid": kid, "alg": "EdDSA", "use": "sig"}


def mint_token(settings, role: str, sub: str, ttl: int = 3600, **extra: object) -> str:
    if not settings.dev_mode:
        raise DevModeError("minting tokens needs dev mode (HERO_DEV_MODE=1); use your identity provider otherwise")
    if ttl <= 0 or ttl > settings.jwt_max_ttl_seconds:
        raise DevModeError(f"--ttl must be in 1..{settings.jwt_max_ttl_seconds} seconds")
    key = _load_or_create(settings.dev_key_dir)
    kid = dev_public_jwk(settings.dev_key_dir)["kid"]
    now = int(time.time())
    claims = {
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "sub": sub,
        settings.jwt_role_claim: role,
        "iat": now,
        "nbf": now,
        "exp": now + ttl,
        "jti": uuid.uuid4().hex,
        **extra,
    }
    return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})
