"""Writes tests/vectors/bundle_v2.json: a `hero-bundle-2` (X25519 suite) sealed with a fixed ephemeral key by
following docs/providers.md with plain `cryptography` calls (`rfc9180.py`), not by the library (whose HPKE
draws a fresh ephemeral key each time). `seal` makes the `hero-bundle-2` bundles of the tests, either key type
(the service no longer issues them; the SDK still opens them when asked).

    PYTHONPATH=. python tests/vectors/make_bundle_v2_vector.py   # only when the format changes (then bump it)
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.vectors import rfc9180
from tests.vectors.make_bundle_vector import PROFILE
from tests.vectors.make_bundle_vector import inputs as v1_inputs
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.profile import profile_from_dict
from verifier.provider import hpke_keys
from verifier.provider.bundle import encode_tables

OUT = Path(__file__).with_name("bundle_v2.json")
SUITE_HEADER = {"format": "hero-bundle-2", "key_type": "x25519", "kem": "DHKEM(X25519, HKDF-SHA256)",
                "kdf": "HKDF-SHA256", "aead": "AES-256-GCM"}
KEMS = {"x25519": "DHKEM(X25519, HKDF-SHA256)", "mlkem768-x25519": "MLKEM768-X25519"}


def prefix_and_info(header: Mapping[str, Any], key_type: str = "x25519") -> tuple[bytes, bytes]:
    """magic || u32be(len(header)) || header (canonical JSON with the suite of `key_type`, docs/providers.md's
    table), and the HPKE `info` that binds it."""
    suite = {**SUITE_HEADER, "key_type": key_type, "kem": KEMS[key_type]}
    hdr = json.dumps({**header, **suite}, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    prefix = b"HRB2" + struct.pack(">I", len(hdr)) + hdr
    return prefix, b"HeRo generation bundle v2\x00" + hashlib.sha256(prefix).digest()


def seal(header: Mapping[str, Any], keyset: KeySet, recipient_public: bytes, key_type: str = "x25519") -> bytes:
    """A `hero-bundle-2` of `keyset` to `recipient_public` with a fresh ephemeral key (RFC 9180 HPKE from
    `cryptography`), as the service sealed them before it signed."""
    prefix, info = prefix_and_info(header, key_type)
    return prefix + hpke_keys.seal(key_type, recipient_public, encode_tables(keyset), info)


def inputs() -> dict:
    v = v1_inputs()
    del v["nonce"]  # HPKE derives its nonce
    v["ephemeral_private"] = hashlib.sha256(b"hero bundle v2 vector: ephemeral").hexdigest()
    return v


def build(v: dict) -> dict:
    profile = profile_from_dict(PROFILE)
    keyset = KeySet(tuple(
        derive_level_table(bytes.fromhex(v["masters"][str(lv)]), profile, lv, v["versions"][str(lv)])
        for lv in (1, 2)
    ))
    sk_r = bytes.fromhex(v["recipient_private"])
    pk_r = rfc9180._raw(rfc9180.X25519PrivateKey.from_private_bytes(sk_r).public_key())
    prefix, info = prefix_and_info(v["header"])
    plaintext = encode_tables(keyset)
    bundle = prefix + rfc9180.seal(pk_r, info, plaintext, bytes.fromhex(v["ephemeral_private"]))
    return {
        "recipient_public": pk_r.hex(),
        "info": info.hex(),
        "plaintext_sha256": hashlib.sha256(plaintext).hexdigest(),
        "table_sizes": {str(t.level): len(t.entries) for t in keyset.tables},
        "bundle_sha256": hashlib.sha256(bundle).hexdigest(),
        "bundle_b64": base64.b64encode(bundle).decode(),
    }


if __name__ == "__main__":
    v = inputs()
    OUT.write_text(json.dumps({"format": "hero-bundle-2", "inputs": v, "expected": build(v)}, indent=1) + "\n")
    print(f"wrote {OUT}")
