"""Writes tests/vectors/bundle_v1.json: a `hero-bundle-1` sealed with a fixed ephemeral key and nonce; `seal` makes
the `hero-bundle-1` bundles of the tests (the service no longer issues them; the SDK still opens them when asked).

    python tests/vectors/make_bundle_vector.py   # only when the format changes on purpose (then bump it)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.profile import profile_from_dict
from verifier.provider.bundle import encode_tables, public_key_of

OUT = Path(__file__).with_name("bundle_v1.json")

PROFILE = {
    "name": "bundle-vector", "spec_version": 2, "vocab_size": 64, "context_width": 3, "segments": 2,
    "tokenizer": "smollm2", "routing": "contiguous",
    "levels": [
        {"bits": 1, "chunks": 4, "encoding": "segments", "fields": [{"name": "model", "bits": 2}]},
        {"bits": 2, "encoding": "value", "fields": [{"name": "user", "bits": 4}]},
    ],
}


def seal(header: Mapping[str, Any], keyset: KeySet, recipient_public: bytes, *, ephemeral_private: bytes | None = None,
         nonce: bytes | None = None) -> bytes:
    """A `hero-bundle-1` of `keyset` to `recipient_public`, as docs/providers.md writes the format (fresh
    ephemeral key and nonce unless given): X25519, HKDF-SHA256, AES-256-GCM over everything before the
    ciphertext."""
    eph = X25519PrivateKey.from_private_bytes(ephemeral_private) if ephemeral_private else X25519PrivateKey.generate()
    nonce = nonce if nonce is not None else os.urandom(12)
    enc = eph.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    shared = eph.exchange(X25519PublicKey.from_public_bytes(recipient_public))
    key = HKDF(hashes.SHA256(), 32, salt=enc + recipient_public, info=b"HeRo generation bundle v1").derive(shared)
    hdr = json.dumps({**header, "format": "hero-bundle-1", "alg": "X25519-HKDF-SHA256-AES256GCM"}, sort_keys=True,
                     separators=(",", ":"), ensure_ascii=True).encode()
    prefix = b"HRB1" + struct.pack(">I", len(hdr)) + hdr + enc + nonce
    return prefix + AESGCM(key).encrypt(nonce, encode_tables(keyset), prefix)


def inputs() -> dict:
    h = lambda label: hashlib.sha256(label.encode()).hexdigest()  # noqa: E731
    return {
        "recipient_private": h("hero bundle vector: recipient"),
        "ephemeral_private": h("hero bundle vector: ephemeral"),
        "nonce": h("hero bundle vector: nonce")[:24],
        "masters": {"1": bytes(range(32)).hex(), "2": bytes(range(32, 64)).hex()},
        "versions": {"1": "l1-v1", "2": "l2-v3"},
        "header": {
            "bundle_id": "00112233445566778899aabbccddeeff", "provider_id": "vector-provider", "profile": PROFILE,
            "key_versions": {"1": "l1-v1", "2": "l2-v3"}, "issued_at": "2026-11-26T00:00:00+00:00",
            "expires_at": "2099-01-01T00:00:00+00:00", "etag": "0123456789abcdef0123456789abcdef",
        },
    }


def build(v: dict) -> dict:
    profile = profile_from_dict(PROFILE)
    keyset = KeySet(tuple(
        derive_level_table(bytes.fromhex(v["masters"][str(lv)]), profile, lv, v["versions"][str(lv)])
        for lv in (1, 2)
    ))
    recipient_public = public_key_of(bytes.fromhex(v["recipient_private"]))
    bundle = seal(v["header"], keyset, recipient_public,
                  ephemeral_private=bytes.fromhex(v["ephemeral_private"]), nonce=bytes.fromhex(v["nonce"]))
    return {
        "recipient_public": recipient_public.hex(),
        "ephemeral_public": public_key_of(bytes.fromhex(v["ephemeral_private"])).hex(),
        "plaintext_sha256": hashlib.sha256(encode_tables(keyset)).hexdigest(),
        "table_sizes": {str(t.level): len(t.entries) for t in keyset.tables},
        "bundle_sha256": hashlib.sha256(bundle).hexdigest(),
        "bundle_b64": base64.b64encode(bundle).decode(),
    }


if __name__ == "__main__":
    v = inputs()
    OUT.write_text(json.dumps({"format": "hero-bundle-1", "inputs": v, "expected": build(v)}, indent=1) + "\n")
    print(f"wrote {OUT}")
