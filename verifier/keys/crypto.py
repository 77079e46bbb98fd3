"""Envelope encryption of master secrets: AES-256-GCM under a fresh per-row data key (DEK).

The associated data binds (profile, level, version) so a row's ciphertext cannot be moved to another
row (swapping rows makes decryption fail instead of silently using the wrong key).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from verifier.keys.kek import KekError, KekProvider


def associated_data(profile: str, level: int, version: str) -> bytes:
    return f"hero/keyrow/v1|profile={profile}|level={level}|version={version}".encode()


@dataclass(frozen=True, repr=False)
class Sealed:
    kek_id: str
    wrapped_dek: bytes
    nonce: bytes
    ciphertext: bytes

    def __repr__(self) -> str:
        return f"Sealed(kek_id={self.kek_id!r})"


def seal(kek: KekProvider, secret: bytes, aad: bytes) -> Sealed:
    dek = secrets.token_bytes(32)
    nonce = secrets.token_bytes(12)
    ct = AESGCM(dek).encrypt(nonce, secret, aad)
    kek_id, wrapped = kek.wrap(dek, aad)
    return Sealed(kek_id, wrapped, nonce, ct)


def open_sealed(kek: KekProvider, sealed: Sealed, aad: bytes) -> bytes:
    dek = kek.unwrap(sealed.kek_id, sealed.wrapped_dek, aad)
    try:
        return AESGCM(dek).decrypt(sealed.nonce, sealed.ciphertext, aad)
    except InvalidTag:
        raise KekError("key row failed authentication (tampered or swapped row)") from None


def rewrap(kek: KekProvider, sealed: Sealed, aad: bytes) -> Sealed:
    """Same DEK and ciphertext, data key re-wrapped under the current KEK."""
    dek = kek.unwrap(sealed.kek_id, sealed.wrapped_dek, aad)
    kek_id, wrapped = kek.wrap(dek, aad)
    return Sealed(kek_id, wrapped, sealed.nonce, sealed.ciphertext)
