"""RFC 9180 HPKE, base mode, single shot, for DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-256-GCM, written
from the RFC with plain `cryptography` primitives (no verifier code, no `cryptography.hazmat.primitives.hpke`):
the independent reading of docs/providers.md that the `hero-bundle-2` vector is reproduced and opened with.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

KEM_ID, KDF_ID, AEAD_ID = 0x0020, 0x0001, 0x0002  # RFC 9180 section 7
SUITE_KEM = b"KEM" + KEM_ID.to_bytes(2, "big")
SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + AEAD_ID.to_bytes(2, "big")
NK, NN, NSECRET = 32, 12, 32


def extract(salt: bytes, ikm: bytes) -> bytes:  # HKDF-Extract = HMAC-SHA256(salt, ikm)
    h = hmac.HMAC(salt, hashes.SHA256())
    h.update(ikm)
    return h.finalize()


def labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    labeled = length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info
    return HKDFExpand(hashes.SHA256(), length, labeled).derive(prk)


def _raw(pk: X25519PublicKey) -> bytes:
    return pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _shared_secret(dh: bytes, enc: bytes, pk_r: bytes) -> bytes:
    eae_prk = labeled_extract(SUITE_KEM, b"", b"eae_prk", dh)
    return labeled_expand(SUITE_KEM, eae_prk, b"shared_secret", enc + pk_r, NSECRET)


def _key_schedule(shared_secret: bytes, info: bytes) -> tuple[bytes, bytes]:
    psk_id_hash = labeled_extract(SUITE, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(SUITE, b"", b"info_hash", info)
    context = b"\x00" + psk_id_hash + info_hash  # mode_base
    secret = labeled_extract(SUITE, shared_secret, b"secret", b"")  # psk = ""
    return labeled_expand(SUITE, secret, b"key", context, NK), labeled_expand(SUITE, secret, b"base_nonce", context,
                                                                            NN)


def seal(pk_r: bytes, info: bytes, plaintext: bytes, sk_e: bytes) -> bytes:
    """enc || ct with the given ephemeral private key (SetupBaseS then Seal at sequence 0, aad = "")."""
    eph = X25519PrivateKey.from_private_bytes(sk_e)
    enc = _raw(eph.public_key())
    shared = _shared_secret(eph.exchange(X25519PublicKey.from_public_bytes(pk_r)), enc, pk_r)
    key, nonce = _key_schedule(shared, info)
    return enc + AESGCM(key).encrypt(nonce, plaintext, b"")


def open_(sk_r: bytes, info: bytes, sealed: bytes) -> bytes:
    sk = X25519PrivateKey.from_private_bytes(sk_r)
    enc, ct = sealed[:32], sealed[32:]
    shared = _shared_secret(sk.exchange(X25519PublicKey.from_public_bytes(enc)), enc, _raw(sk.public_key()))
    key, nonce = _key_schedule(shared, info)
    return AESGCM(key).decrypt(nonce, ct, b"")
