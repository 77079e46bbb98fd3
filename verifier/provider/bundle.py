"""Sealed, signed generation-key bundles (format `hero-bundle-3`; `hero-bundle-2` and `-1` unsigned, no longer
issued and only opened, when asked: docs/providers.md): one module for both sides.

The service seals the active key table of every level to a provider's registered public key and signs the
whole bundle with its transparency-log key (Ed25519, the key `GET /v1/audit/public-key` names); the provider
checks the signature against the service key it pinned, checks the bundle names it, then opens it with its
private key. Sealing alone is not authentication: anyone holding the provider's public key can seal tables to
it, so an unsigned bundle proves nothing about who made it.

`hero-bundle-3` (what the service issues) is `hero-bundle-2`'s HPKE seal plus that signature:

    body   = "HRB3" || u32be(len(header)) || header || enc || AES-256-GCM ciphertext   (HPKE single-shot)
    info   = "HeRo generation bundle v3" || 0x00 || SHA-256(every byte before enc)
    bundle = body || Ed25519(service key, "HeRo generation bundle v3 signature" || 0x00 || SHA-256(body))

The header's `signer` names the signing key (`<name>+<key id hex>`, the vkey's first two fields).

`hero-bundle-2` is RFC 9180 HPKE from `cryptography`
(`hpke_keys`: X25519, or the hybrid ML-KEM-768 + X25519), the header bound through HPKE's `info`:

    bundle = "HRB2" || u32be(len(header)) || header || enc || AES-256-GCM ciphertext   (HPKE single-shot)
    info   = "HeRo generation bundle v2" || 0x00 || SHA-256(every byte before enc)

`hero-bundle-1` (unsigned, opened only with `allow_unsigned=True`) was a hand-made HPKE-style schedule over X25519:

    enc    = ephemeral X25519 public key (32 bytes)
    key    = HKDF-SHA256(ikm = X25519(eph, pkR), salt = enc || pkR, info = "HeRo generation bundle v1", L = 32)
    bundle = "HRB1" || u32be(len(header)) || header || enc || nonce(12) || AES-256-GCM(key, nonce, tables, aad)
    aad    = every byte before the ciphertext (magic, header, enc, nonce): the header cannot be altered

The header (canonical JSON) names the profile (its full definition), key versions, bundle id, provider,
issue and expiry times and the ETag. Opened tables live in memory only; nothing here logs or prints them.
No FastAPI, SQLAlchemy or settings import: providers install this without the service.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, Protocol

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from verifier.engine.keys import KEY_BYTES, KeySet, KeyTable
from verifier.engine.profile import Profile, ProfileError, profile_from_dict
from verifier.provider import hpke_keys

MAGIC = b"HRB1"
FORMAT = "hero-bundle-1"
ALG = "X25519-HKDF-SHA256-AES256GCM"
HKDF_INFO = b"HeRo generation bundle v1"
NONCE_BYTES = 12
X25519_BYTES = 32
MAX_HEADER_BYTES = 64 * 1024
MAGIC2 = b"HRB2"
FORMAT2 = "hero-bundle-2"
INFO2_LABEL = b"HeRo generation bundle v2\x00"
MAGIC3 = b"HRB3"
FORMAT3 = "hero-bundle-3"
INFO3_LABEL = b"HeRo generation bundle v3\x00"
SIG3_LABEL = b"HeRo generation bundle v3 signature\x00"
SIG_ALG = "Ed25519"
SIG_BYTES = 64


class BundleError(ValueError):
    """The bundle cannot be used: malformed, not for this key, tampered with, or inconsistent."""


class BundleExpired(BundleError):
    """The bundle's `expires_at` has passed: fetch a fresh one."""


def _b64decode(data: str | bytes) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BundleError("bundle is not valid base64") from None


def generate_keypair(key_type: str = "x25519") -> tuple[bytes, bytes]:
    """A provider's (private, public) raw key pair of `key_type` (`x25519`: 32/32 bytes; `mlkem768-x25519`:
    96/1216); register the public half (base64) with the same key type."""
    try:
        return hpke_keys.generate(key_type)
    except ValueError as exc:
        raise BundleError(str(exc)) from None


def public_key_of(private_key: bytes) -> bytes:
    try:
        return hpke_keys.public_of(bytes(private_key))
    except ValueError as exc:
        raise BundleError(str(exc)) from None


def _raw_public(pk: X25519PublicKey) -> bytes:
    return pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _private(raw: bytes) -> X25519PrivateKey:
    if not isinstance(raw, bytes | bytearray) or len(raw) != X25519_BYTES:
        raise BundleError("private key must be the raw 32-byte X25519 private key")
    return X25519PrivateKey.from_private_bytes(bytes(raw))


def parse_public_key(data: str | bytes, key_type: str = "x25519") -> bytes:
    """Raw public key of `key_type` from base64 (or raw bytes); rejects keys no exchange can use."""
    if key_type != "x25519":
        try:
            raw = data if isinstance(data, bytes) else base64.b64decode(data, validate=True)
            hpke_keys.public_key(key_type, raw)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise BundleError(f"public_key is not a usable {key_type} public key (base64): {exc}") from None
        return bytes(raw)
    raw = data if isinstance(data, bytes) and len(data) == X25519_BYTES else None
    if raw is None:
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise BundleError("public_key must be base64 of the raw 32-byte X25519 public key") from None
    if len(raw) != X25519_BYTES:
        raise BundleError("public_key must be base64 of the raw 32-byte X25519 public key")
    try:  # a low-order point gives an all-zero shared secret: OpenSSL refuses it
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(raw))
    except ValueError:
        raise BundleError("public_key is not a usable X25519 public key") from None
    return raw


def _derive_key(shared: bytes, enc: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=enc + recipient, info=HKDF_INFO).derive(shared)


def canonical_header(header: Mapping[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


# -- plaintext: the key tables --------------------------------------------------------------------
def encode_tables(keyset: KeySet) -> bytes:
    """u8 L, then per level: u8 level, u8 len(version), version, u32be n, n x 16-byte keys, u8 flags
    (bit 0: a 16-byte position key follows, bit 1: then a 16-byte spec v3 level key; 0/1 in older bundles)."""
    out = bytearray([keyset.levels])
    for t in keyset.tables:
        v = t.version.encode("ascii")
        out += struct.pack(">BB", t.level, len(v)) + v + struct.pack(">I", len(t.entries))
        for e in t.entries:
            if len(e) != KEY_BYTES:
                raise BundleError("key table entry has the wrong length")
            out += e
        out.append((t.position is not None) | (t.level_key is not None) << 1)
        out += (t.position or b"") + (t.level_key or b"")
    return bytes(out)


def decode_tables(data: bytes) -> KeySet:
    try:
        n_levels = data[0]
        i = 1
        tables = []
        for _ in range(n_levels):
            level, vlen = struct.unpack_from(">BB", data, i)
            i += 2
            version = data[i : i + vlen].decode("ascii")
            i += vlen
            (n,) = struct.unpack_from(">I", data, i)
            i += 4
            blob = data[i : i + n * KEY_BYTES]
            if len(blob) != n * KEY_BYTES:
                raise BundleError("bundle key table is truncated")
            entries = tuple(blob[j : j + KEY_BYTES] for j in range(0, len(blob), KEY_BYTES))
            i += n * KEY_BYTES
            flags = data[i]
            i += 1
            if flags > 3:
                raise BundleError("bundle key table flags are unknown")
            extra: list[bytes | None] = []
            for bit in (1, 2):  # position key, then the v3 level key
                key = None
                if flags & bit:
                    key = data[i : i + KEY_BYTES]
                    if len(key) != KEY_BYTES:
                        raise BundleError("bundle position or level key is truncated")
                    i += KEY_BYTES
                extra.append(key)
            tables.append(KeyTable(level, version, entries, extra[0], extra[1]))
    except (IndexError, struct.error, UnicodeDecodeError):
        raise BundleError("bundle key tables are malformed") from None
    if i != len(data):
        raise BundleError("bundle key tables have trailing bytes")
    return KeySet(tuple(tables))


# -- hero-bundle-3: signed by the service -------------------------------------------------------------
class PinnedKey(Protocol):
    """A signed-note verifier key (C2SP): `ServiceKey` here, `verifier.audit.transparency.NoteVerifier` too."""

    name: str
    key_id: bytes
    public_key: Ed25519PublicKey


@dataclass(frozen=True)
class ServiceVerifierKey:
    """The service's published key `<name>+<key id hex>+<base64(0x01 || Ed25519 public key)>` (C2SP signed-note
    verifier key: what `GET /v1/audit/public-key` answers). Parsed here, not imported from `verifier.audit`, so
    the SDK stays free of service packages; tests check both parsers agree."""

    name: str
    key_id: bytes
    public_key: Ed25519PublicKey

    @classmethod
    def parse(cls, vkey: str) -> ServiceVerifierKey:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or not parts[0] or any(c.isspace() for c in parts[0]):
            raise BundleError("service_key is not a verifier key <name>+<key id>+<key> (GET /v1/audit/public-key)")
        name, kid_hex, key_b64 = parts
        try:
            raw = base64.b64decode(key_b64.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        if len(raw) != 33 or raw[0] != 0x01:
            raise BundleError("service_key is not an Ed25519 verifier key (GET /v1/audit/public-key)")
        kid = hashlib.sha256(name.encode() + b"\n" + raw[:1] + raw[1:]).digest()[:4]
        if kid_hex.lower() != kid.hex():
            raise BundleError("service_key's key id does not match its key")
        return cls(name, kid, Ed25519PublicKey.from_public_bytes(raw[1:]))


ServiceKey = str | Path | PinnedKey | Sequence[str | Path | PinnedKey]


def service_keys(pinned: ServiceKey) -> tuple[PinnedKey, ...]:
    """The pinned service key(s): a verifier key string `<name>+<key id>+<key>` (what `GET /v1/audit/public-key`
    answers, `hero audit public-key` prints), a file (a `Path`) holding one per line, a parsed key, or a list of
    these (a rotation: old and new key both pinned for a while)."""
    items = [pinned] if isinstance(pinned, str | Path) or hasattr(pinned, "public_key") else list(pinned)
    out: list[PinnedKey] = []
    for item in items:
        if hasattr(item, "public_key") and hasattr(item, "key_id"):
            out.append(item)  # type: ignore[arg-type]
            continue
        if isinstance(item, Path):
            try:
                lines = [ln.strip() for ln in item.read_text().splitlines() if ln.strip()]
            except (OSError, UnicodeDecodeError) as exc:
                raise BundleError(f"service key file {item} is not readable ({exc.__class__.__name__})") from None
        elif isinstance(item, str):
            lines = [item.strip()]
        else:
            raise BundleError("service_key must be a verifier key string, a Path, a parsed key or a list of them")
        out.extend(ServiceVerifierKey.parse(line) for line in lines)
    if not out:
        raise BundleError("no service key pinned: bundles cannot be authenticated")
    return tuple(out)


def signer_name(verifier: PinnedKey) -> str:
    """`<name>+<key id hex>`: how a bundle header names the key that signed it."""
    return f"{verifier.name}+{verifier.key_id.hex()}"


def seal_bundle_v3(header: Mapping[str, Any], keyset: KeySet, recipient_public: bytes, key_type: str,
                   signing_key: Ed25519PrivateKey, signer: str) -> bytes:
    """`hero-bundle-3`: the tables HPKE-sealed to `recipient_public`, the whole bundle signed with `signing_key`
    (the service's transparency-log key; `signer` is the log's origin, the name in its verifier key)."""
    try:
        kt = hpke_keys.key_type(key_type)
    except ValueError as exc:
        raise BundleError(str(exc)) from None
    pub = signing_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    vkey = ServiceVerifierKey(signer, hashlib.sha256(signer.encode() + b"\n\x01" + pub).digest()[:4],
                              signing_key.public_key())
    hdr = canonical_header({**header, "format": FORMAT3, "key_type": kt.name, "kem": kt.kem_name,
                            "kdf": hpke_keys.KDF_NAME, "aead": hpke_keys.AEAD_NAME, "sig": SIG_ALG,
                            "signer": signer_name(vkey)})
    if len(hdr) > MAX_HEADER_BYTES:
        raise BundleError("bundle header is too large")
    prefix = MAGIC3 + struct.pack(">I", len(hdr)) + hdr
    try:
        body = prefix + hpke_keys.seal(kt.name, recipient_public, encode_tables(keyset), _info(INFO3_LABEL, prefix))
    except ValueError as exc:
        raise BundleError(f"recipient key: {exc}") from None
    return body + signing_key.sign(_signed_v3(body))


def _info(label: bytes, prefix: bytes) -> bytes:
    """HPKE `info` of a `hero-bundle-2` / `-3`: binds magic, header length and header (`prefix`) under its label."""
    return label + hashlib.sha256(prefix).digest()


def _signed_v3(body: bytes) -> bytes:
    return SIG3_LABEL + hashlib.sha256(body).digest()


def _verify_v3(raw: bytes, header: dict[str, Any], signature: bytes, pinned: tuple[PinnedKey, ...]) -> None:
    """The signature of one pinned key over the whole bundle, checked before anything is decrypted."""
    body = raw[:-SIG_BYTES]
    for v in pinned:
        if signer_name(v) != header["signer"]:
            continue
        try:
            v.public_key.verify(signature, _signed_v3(body))
            return
        except InvalidSignature:
            break
    raise BundleError("bundle signature is not valid for the pinned service key: not issued by this service, "
                      "or altered")


def _prefix(raw: bytes, after: int) -> tuple[Any, bytes]:
    """The header (parsed JSON, neither checked nor authenticated) and the prefix magic || u32be(len) || header
    of a bundle of any format, `after` bytes at least following the header."""
    (hlen,) = struct.unpack_from(">I", raw, 4) if len(raw) >= 8 else (None,)
    if hlen is None or hlen > MAX_HEADER_BYTES or len(raw) < 8 + hlen + after:
        raise BundleError("bundle is truncated")
    try:
        return json.loads(raw[8 : 8 + hlen]), raw[: 8 + hlen]
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BundleError("bundle header is not JSON") from None


def _split_hpke(raw: bytes, fmt: str) -> tuple[dict[str, Any], bytes, bytes, bytes]:
    """(header, prefix, enc || ciphertext, signature) of a `hero-bundle-2` or `-3` (`fmt`; a v2 has no signature:
    b""), its header naming `fmt` and a known suite; nothing here is authenticated yet."""
    signed = fmt == FORMAT3
    header, prefix = _prefix(raw, X25519_BYTES + 16 + (SIG_BYTES if signed else 0))
    kt = hpke_keys.KEY_TYPES.get(header.get("key_type")) if isinstance(header, dict) else None
    if (kt is None or header.get("format") != fmt or header.get("kem") != kt.kem_name
            or header.get("kdf") != hpke_keys.KDF_NAME or header.get("aead") != hpke_keys.AEAD_NAME
            or (signed and (header.get("sig") != SIG_ALG or not isinstance(header.get("signer"), str)))):
        raise BundleError(f"unsupported bundle format (expected {fmt} with a known suite)")
    sealed = raw[len(prefix) :]
    return (header, prefix, sealed[:-SIG_BYTES], sealed[-SIG_BYTES:]) if signed else (header, prefix, sealed, b"")


def read_header(bundle: str | bytes) -> dict[str, Any]:
    """The header, unauthenticated (for routing and display): trust it only after `open_bundle`."""
    raw = _as_bytes(bundle)
    if raw[:4] in (MAGIC2, MAGIC3):
        return _split_hpke(raw, FORMAT3 if raw[:4] == MAGIC3 else FORMAT2)[0]
    return _split(raw)[0]


def _as_bytes(bundle: str | bytes) -> bytes:
    if isinstance(bundle, str):
        return _b64decode(bundle)
    if isinstance(bundle, bytes | bytearray) and bytes(bundle[:4]) in (MAGIC, MAGIC2, MAGIC3):
        return bytes(bundle)
    if isinstance(bundle, bytes | bytearray):
        return _b64decode(bytes(bundle))
    raise BundleError("bundle must be the base64 string or the raw bytes")


def _split(raw: bytes) -> tuple[dict[str, Any], bytes, bytes, bytes, bytes]:
    """(header, enc, nonce, aad, ciphertext) of a `hero-bundle-1`."""
    if raw[:4] != MAGIC or len(raw) < 8:
        raise BundleError("not a HeRo generation bundle (bad magic)")
    header, prefix = _prefix(raw, X25519_BYTES + NONCE_BYTES + 16)
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("alg") != ALG:
        raise BundleError(f"unsupported bundle format (expected {FORMAT}, {ALG})")
    i = len(prefix)
    enc = raw[i : i + X25519_BYTES]
    nonce = raw[i + X25519_BYTES : i + X25519_BYTES + NONCE_BYTES]
    split = i + X25519_BYTES + NONCE_BYTES
    return header, enc, nonce, raw[:split], raw[split:]


def _parse_time(value: Any, name: str) -> datetime:
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise BundleError(f"bundle header {name} is not an ISO-8601 time") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


@dataclass(frozen=True, repr=False)
class GenerationBundle:
    """An opened bundle: the profile, every level's active key table (memory only) and its metadata."""

    profile: Profile
    keyset: KeySet
    key_versions: dict[int, str]
    bundle_id: str
    provider_id: str
    etag: str
    issued_at: datetime
    expires_at: datetime
    header: dict[str, Any]

    def __repr__(self) -> str:  # never the key bytes
        return (f"GenerationBundle(id={self.bundle_id!r}, profile={self.profile.name!r}, "
                f"versions={self.key_versions}, expires_at={self.expires_at.isoformat()})")

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        """Never pickled (nor copied): a pickle would carry the raw key tables to disk, a queue or another process."""
        raise TypeError("GenerationBundle holds key material and cannot be pickled or copied; "
                        "pass the sealed bundle and open it where it is used")

    def expired(self, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) >= self.expires_at

    def require_fresh(self) -> None:
        """BundleExpired once `expires_at` has passed: every generation path stops watermarking with it."""
        if self.expired():
            raise BundleExpired(f"bundle {self.bundle_id} expired at {self.expires_at.isoformat()}; "
                                "fetch a fresh one (BundleSource, POST /v1/keys/generation-bundle)")


def open_bundle(
    bundle: str | bytes,
    private_key: bytes,
    *,
    service_key: ServiceKey | None,
    provider_id: str,
    now: datetime | None = None,
    allow_expired: bool = False,
    allow_unsigned: bool = False,
) -> GenerationBundle:
    """Check and open a bundle with the provider's raw private key.

    `service_key`: the service's pinned verifier key(s) (`service_keys`); a `hero-bundle-3` must carry a valid
    signature of one of them, checked before anything is decrypted. `provider_id`: this provider's registered id;
    a bundle naming another provider is refused. The unsigned `hero-bundle-2` / `-1` (anyone with the provider's
    public key can make one) are refused unless `allow_unsigned=True` (a migration from a service that did not
    sign yet; `service_key` may then be None).

    Raises BundleError on a missing or wrong signature, a wrong key or any altered byte, on tables that do not
    match the header's profile and versions, on another provider's bundle, and BundleExpired after `expires_at`
    (unless `allow_expired`).
    """
    if not isinstance(provider_id, str) or not provider_id:
        raise BundleError("provider_id (this provider's registered id) is required")
    raw = _as_bytes(bundle)
    if raw[:4] == MAGIC3:
        if service_key is None:
            raise BundleError("service_key is required: a bundle is only trusted when the service's signature checks")
        header, prefix, sealed, signature = _split_hpke(raw, FORMAT3)
        _verify_v3(raw, header, signature, service_keys(service_key))
        header, plaintext = _open_hpke(header, prefix, sealed, private_key, _info(INFO3_LABEL, prefix))
    elif not allow_unsigned:
        fmt = FORMAT2 if raw[:4] == MAGIC2 else FORMAT if raw[:4] == MAGIC else "unknown"
        raise BundleError(f"unsigned bundle ({fmt}) refused: only a {FORMAT3} signed by the pinned service key is "
                          f"accepted (allow_unsigned=True opens one from a service that does not sign yet)")
    elif raw[:4] == MAGIC2:
        header, plaintext = _open_v2(raw, private_key)
    else:
        header, plaintext = _open_v1(raw, private_key)
    if header.get("provider_id") != provider_id:
        raise BundleError("bundle is for another provider (its provider_id is not this provider's)")
    try:
        profile = profile_from_dict(header["profile"])
    except (KeyError, TypeError, ProfileError) as exc:
        raise BundleError(f"bundle profile is invalid ({exc.__class__.__name__})") from None
    keyset = decode_tables(plaintext)
    versions = _check_tables(profile, keyset, header.get("key_versions"))
    bundle_obj = GenerationBundle(
        profile=profile,
        keyset=keyset,
        key_versions=versions,
        bundle_id=str(header.get("bundle_id", "")),
        provider_id=str(header.get("provider_id", "")),
        etag=str(header.get("etag", "")),
        issued_at=_parse_time(header.get("issued_at"), "issued_at"),
        expires_at=_parse_time(header.get("expires_at"), "expires_at"),
        header=header,
    )
    if not allow_expired and bundle_obj.expired(now):
        raise BundleExpired(f"bundle {bundle_obj.bundle_id} expired at {bundle_obj.expires_at.isoformat()}")
    return bundle_obj


def _open_v2(raw: bytes, private_key: bytes) -> tuple[dict[str, Any], bytes]:
    header, prefix, sealed, _ = _split_hpke(raw, FORMAT2)
    return _open_hpke(header, prefix, sealed, private_key, _info(INFO2_LABEL, prefix))


def _open_hpke(header: dict[str, Any], prefix: bytes, sealed: bytes, private_key: bytes,
               info: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        kt, plaintext = hpke_keys.open_sealed(bytes(private_key), sealed, info)
    except ValueError:
        raise BundleError("bundle does not open: wrong private key, or the bundle was altered") from None
    if kt.name != header["key_type"]:  # authenticated: `info` covers the header
        raise BundleError("bundle key_type does not match the private key")
    return header, plaintext


def _open_v1(raw: bytes, private_key: bytes) -> tuple[dict[str, Any], bytes]:
    header, enc, nonce, aad, ciphertext = _split(raw)
    sk = _private(private_key)
    recipient = _raw_public(sk.public_key())
    try:
        key = _derive_key(sk.exchange(X25519PublicKey.from_public_bytes(enc)), enc, recipient)
        return header, AESGCM(key).decrypt(nonce, ciphertext, aad)
    except (InvalidTag, ValueError):
        raise BundleError("bundle does not open: wrong private key, or the bundle was altered") from None


def _check_tables(profile: Profile, keyset: KeySet, declared: Any) -> dict[int, str]:
    """Every level 1..L once, in order, with the table size the profile's spec version needs."""
    if [t.level for t in keyset.tables] != list(range(1, profile.depth + 1)):
        raise BundleError(f"bundle must hold levels 1..{profile.depth} of profile {profile.name!r}")
    for t, lv in zip(keyset.tables, profile.levels, strict=True):
        if len(t.entries) != 1 << lv.key_bits:
            raise BundleError(f"level {t.level} table has {len(t.entries)} keys; the profile needs {1 << lv.key_bits}")
        if (t.level == 1) != (t.position is not None):
            raise BundleError("only level 1 carries the position key")
    versions = {t.level: t.version for t in keyset.tables}
    try:
        named = {int(k): v for k, v in declared.items()} if isinstance(declared, dict) else None
    except ValueError:
        named = None
    if named != versions:
        raise BundleError("bundle header key_versions do not match its tables")
    return versions
