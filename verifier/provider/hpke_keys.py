"""RFC 9180 HPKE for `hero-bundle-2` (docs/providers.md): the provider key types and their suites, from
`cryptography.hazmat.primitives.hpke` (single-shot base mode; nothing hand-rolled).

* `x25519`: DHKEM(X25519, HKDF-SHA256) (KEM 0x0020); keys are the raw 32-byte public / private keys.
* `mlkem768-x25519`: the hybrid ML-KEM-768 + X25519 KEM (0x647A); public = ML-KEM-768 encapsulation key (1184)
  || X25519 public (32) = 1216 bytes; private = ML-KEM-768 seed d||z (64) || X25519 private (32) = 96 bytes.
Both with HKDF-SHA256 (0x0001) and AES-256-GCM (0x0002).

No service import: providers install this with the SDK. Errors are ValueError (the bundle layer words them).
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519

MLKEM_PUBLIC, MLKEM_SEED, X25519_BYTES = 1184, 64, 32


@dataclass(frozen=True)
class KeyType:
    name: str
    kem: hpke.KEM
    kem_name: str  # as written in the bundle header
    public_bytes: int
    private_bytes: int


KEY_TYPES: dict[str, KeyType] = {
    "x25519": KeyType("x25519", hpke.KEM.X25519, "DHKEM(X25519, HKDF-SHA256)", X25519_BYTES, X25519_BYTES),
    "mlkem768-x25519": KeyType("mlkem768-x25519", hpke.KEM.MLKEM768_X25519, "MLKEM768-X25519",
                               MLKEM_PUBLIC + X25519_BYTES, MLKEM_SEED + X25519_BYTES),
}
KDF_NAME, AEAD_NAME = "HKDF-SHA256", "AES-256-GCM"


def key_type(name: str) -> KeyType:
    try:
        return KEY_TYPES[name]
    except KeyError:
        raise ValueError(f"key_type must be one of {', '.join(KEY_TYPES)}") from None


def suite(kt: KeyType) -> hpke.Suite:
    return hpke.Suite(kt.kem, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)


def _raw(pk: x25519.X25519PublicKey) -> bytes:
    return pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate(name: str = "x25519") -> tuple[bytes, bytes]:
    """(private, public) raw bytes of a new key of this type."""
    kt = key_type(name)
    xs = x25519.X25519PrivateKey.generate()
    xraw = xs.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    if kt.name == "x25519":
        return xraw, _raw(xs.public_key())
    ms = mlkem.MLKEM768PrivateKey.generate()
    return ms.private_bytes_raw() + xraw, ms.public_key().public_bytes_raw() + _raw(xs.public_key())


def type_of_private(raw: bytes) -> KeyType:
    for kt in KEY_TYPES.values():
        if len(raw) == kt.private_bytes:
            return kt
    raise ValueError("private key is neither a 32-byte X25519 nor a 96-byte ML-KEM-768+X25519 key")


def private_key(raw: bytes):
    kt = type_of_private(raw)
    xs = x25519.X25519PrivateKey.from_private_bytes(bytes(raw[-X25519_BYTES:]))
    if kt.name == "x25519":
        return xs
    return hpke.MLKEM768X25519PrivateKey(mlkem.MLKEM768PrivateKey.from_seed_bytes(bytes(raw[:MLKEM_SEED])), xs)


def public_of(raw_private: bytes) -> bytes:
    kt = type_of_private(raw_private)
    xs = x25519.X25519PrivateKey.from_private_bytes(bytes(raw_private[-X25519_BYTES:]))
    if kt.name == "x25519":
        return _raw(xs.public_key())
    ms = mlkem.MLKEM768PrivateKey.from_seed_bytes(bytes(raw_private[:MLKEM_SEED]))
    return ms.public_key().public_bytes_raw() + _raw(xs.public_key())


def public_key(name: str, raw: bytes):
    """The recipient key object; ValueError for a wrong length or a key no exchange can use."""
    kt = key_type(name)
    if len(raw) != kt.public_bytes:
        raise ValueError(f"a {kt.name} public key is {kt.public_bytes} bytes")
    xp = x25519.X25519PublicKey.from_public_bytes(bytes(raw[-X25519_BYTES:]))
    x25519.X25519PrivateKey.generate().exchange(xp)  # a low-order point: OpenSSL refuses it (ValueError)
    if kt.name == "x25519":
        return xp
    return hpke.MLKEM768X25519PublicKey(mlkem.MLKEM768PublicKey.from_public_bytes(bytes(raw[:MLKEM_PUBLIC])), xp)


def seal(name: str, recipient_public: bytes, plaintext: bytes, info: bytes) -> bytes:
    """enc ‖ ciphertext (RFC 9180 single-shot base mode, sequence 0, empty AEAD associated data)."""
    kt = key_type(name)
    return suite(kt).encrypt(plaintext, public_key(name, recipient_public), info=info)


def open_sealed(raw_private: bytes, sealed: bytes, info: bytes) -> tuple[KeyType, bytes]:
    kt = type_of_private(raw_private)
    try:
        return kt, suite(kt).decrypt(sealed, private_key(raw_private), info=info)
    except (InvalidTag, ValueError):
        raise ValueError("HPKE open failed") from None
