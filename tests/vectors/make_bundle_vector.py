"""Writes tests/vectors/bundle_v1.json: a `hero-bundle-1` sealed with a fixed ephemeral key and nonce.

    python tests/vectors/make_bundle_vector.py   # only when the format changes on purpose (then bump it)
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from verifier.engine.keys import KeySet, derive_level_table
from verifier.engine.profile import profile_from_dict
from verifier.provider.bundle import encode_tables, public_key_of, seal_bundle

OUT = Path(__file__).with_name("bundle_v1.json")

PROFILE = {
    "name": "bundle-vector", "spec_version": 2, "vocab_size": 64, "context_width": 3, "segments": 2,
    "tokenizer": "smollm2", "routing": "contiguous",
    "levels": [
        {"bits": 1, "chunks": 4, "encoding": "segments", "fields": [{"name": "model", "bits": 2}]},
        {"bits": 2, "encoding": "value", "fields": [{"name": "user", "bits": 4}]},
    ],
}


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
    bundle = seal_bundle(v["header"], keyset, recipient_public,
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
