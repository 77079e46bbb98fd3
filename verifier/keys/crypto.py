"""Envelope encryption: AES-256-GCM under a fresh data key (DEK) that the KEK provider wraps.

One helper for everything sealed at rest: a watermark key row seals its master secret under its own
DEK; a decode job seals all its texts under one per-job DEK. Associated data binds each ciphertext to
its place (profile/level/version of a key row; job id and index of a job text), so moving a ciphertext
to another row makes decryption fail instead of silently using the wrong data.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from verifier.keys.kek import KekError, KekProvider

DEK_BYTES = 32
NONCE_BYTES = 12


def associated_data(profile: str, level: int, version: str) -> bytes:
    return f"hero/keyrow/v1|profile={profile}|level={level}|version={version}".encode()


@dataclass(frozen=True, repr=False)
class DataKey:
    """A DEK in clear (process memory only) and its wrapped form (what is stored)."""

    dek: bytes
    kek_id: str
    wrapped: bytes

    def __repr__(self) -> str:
        return f"DataKey(kek_id={self.kek_id!r})"


def new_data_key(kek: KekProvider, aad: bytes) -> DataKey:
    dek = secrets.token_bytes(DEK_BYTES)
    kek_id, wrapped = kek.wrap(dek, aad)
    return DataKey(dek, kek_id, wrapped)


def open_data_key(kek: KekProvider, kek_id: str, wrapped: bytes, aad: bytes) -> DataKey:
    return DataKey(kek.unwrap(kek_id, wrapped, aad), kek_id, wrapped)


def encrypt(dek: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
    """(nonce, ciphertext) under a fresh random nonce."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce, AESGCM(dek).encrypt(nonce, plaintext, aad)


def decrypt(dek: bytes, nonce: bytes, ciphertext: bytes, aad: bytes, what: str) -> bytes:
    try:
        return AESGCM(dek).decrypt(nonce, ciphertext, aad)
    except InvalidTag:
        raise KekError(f"{what} failed authentication (tampered or swapped row)") from None


@dataclass(frozen=True, repr=False)
class Sealed:
    kek_id: str
    wrapped_dek: bytes
    nonce: bytes
    ciphertext: bytes

    def __repr__(self) -> str:
        return f"Sealed(kek_id={self.kek_id!r})"


def seal(kek: KekProvider, secret: bytes, aad: bytes) -> Sealed:
    key = new_data_key(kek, aad)
    nonce, ct = encrypt(key.dek, secret, aad)
    return Sealed(key.kek_id, key.wrapped, nonce, ct)


def open_sealed(kek: KekProvider, sealed: Sealed, aad: bytes) -> bytes:
    key = open_data_key(kek, sealed.kek_id, sealed.wrapped_dek, aad)
    return decrypt(key.dek, sealed.nonce, sealed.ciphertext, aad, "key row")


def rewrap(kek: KekProvider, sealed: Sealed, aad: bytes) -> Sealed:
    """Same DEK and ciphertext, data key re-wrapped under the current KEK."""
    dek = open_data_key(kek, sealed.kek_id, sealed.wrapped_dek, aad).dek
    kek_id, wrapped = kek.wrap(dek, aad)
    return Sealed(kek_id, wrapped, sealed.nonce, sealed.ciphertext)
