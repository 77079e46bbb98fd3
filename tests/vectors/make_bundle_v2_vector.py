"""Writes tests/vectors/bundle_v2.json: a `hero-bundle-2` (X25519 suite) sealed with a fixed ephemeral key by
following docs/providers.md with plain `cryptography` calls (`rfc9180.py`), not by the library (whose HPKE
draws a fresh ephemeral key each time).

    PYTHONPATH=. python tests/vectors/make_bundle_v2_vector.py   # only when the format changes (then bump it)
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path

from tests.vectors import rfc9180
from tests.vectors.make_bundle_vector import PROFILE
from tests.vectors.make_bundle_vector import inputs as v1_inputs
from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.profile import profile_from_dict
from verifier.provider.bundle import encode_tables

OUT = Path(__file__).with_name("bundle_v2.json")
SUITE_HEADER = {"format": "hero-bundle-2", "key_type": "x25519", "kem": "DHKEM(X25519, HKDF-SHA256)",
                "kdf": "HKDF-SHA256", "aead": "AES-256-GCM"}


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
    header = json.dumps({**v["header"], **SUITE_HEADER}, sort_keys=True, separators=(",", ":"),
                        ensure_ascii=True).encode()
    prefix = b"HRB2" + struct.pack(">I", len(header)) + header
    info = b"HeRo generation bundle v2\x00" + hashlib.sha256(prefix).digest()
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
