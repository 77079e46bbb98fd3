"""hero-bundle-1 (unsigned: opened only with allow_unsigned; no longer issued, so the tests seal their own with
tests/vectors/make_bundle_vector.py): the frozen vector, opening with real profiles, and every way a bundle must
fail."""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tests.helpers.keys import make_keyset
from tests.vectors.make_bundle_vector import seal as seal_v1
from verifier.engine.keys import KeySet
from verifier.engine.profile import default_profile, v1_profile
from verifier.provider import BundleError, BundleExpired, generate_keypair, read_header
from verifier.provider import open_bundle as _open
from verifier.provider.bundle import encode_tables, parse_public_key, public_key_of

VECTOR = json.loads((Path(__file__).parents[1] / "vectors" / "bundle_v1.json").read_text())


def open_bundle(bundle, private_key, **kw):
    """The unsigned formats open only when asked (`allow_unsigned`; refusals and the provider check are in
    test_bundle_signed.py): here, their layout."""
    try:
        provider = read_header(bundle)["provider_id"]
    except (BundleError, KeyError):
        provider = "acme"
    return _open(bundle, private_key, service_key=None, provider_id=provider, allow_unsigned=True, **kw)


def _header(profile, keyset, expires: datetime | None = None) -> dict:
    now = datetime.now(UTC).replace(microsecond=0)
    return {
        "bundle_id": "b" * 32, "provider_id": "acme", "profile": profile.to_dict(),
        "key_versions": {str(t.level): t.version for t in keyset.tables},
        "issued_at": now.isoformat(), "expires_at": (expires or now + timedelta(hours=1)).isoformat(),
        "etag": "e" * 32,
    }


def test_vector_is_reproduced_byte_for_byte():
    from tests.vectors.make_bundle_vector import build

    assert build(VECTOR["inputs"]) == VECTOR["expected"]


def test_vector_opens_by_following_the_written_spec():
    """docs/providers.md, step by step with plain `cryptography` calls (no verifier code)."""
    v, exp = VECTOR["inputs"], VECTOR["expected"]
    raw = base64.b64decode(exp["bundle_b64"])
    assert raw[:4] == b"HRB1"
    (hlen,) = struct.unpack(">I", raw[4:8])
    header = json.loads(raw[8 : 8 + hlen])
    assert raw[8 : 8 + hlen] == json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    assert header["format"] == "hero-bundle-1" and header["alg"] == "X25519-HKDF-SHA256-AES256GCM"
    enc = raw[8 + hlen : 8 + hlen + 32]
    nonce = raw[8 + hlen + 32 : 8 + hlen + 44]
    assert enc.hex() == exp["ephemeral_public"] and nonce.hex() == v["nonce"]
    sk = X25519PrivateKey.from_private_bytes(bytes.fromhex(v["recipient_private"]))
    pk_r = bytes.fromhex(exp["recipient_public"])
    shared = sk.exchange(X25519PublicKey.from_public_bytes(enc))
    key = HKDF(hashes.SHA256(), 32, salt=enc + pk_r, info=b"HeRo generation bundle v1").derive(shared)
    plaintext = AESGCM(key).decrypt(nonce, raw[8 + hlen + 44 :], raw[: 8 + hlen + 44])
    import hashlib

    assert hashlib.sha256(plaintext).hexdigest() == exp["plaintext_sha256"]
    assert plaintext[0] == 2  # levels
    opened = open_bundle(exp["bundle_b64"], bytes.fromhex(v["recipient_private"]))
    assert opened.key_versions == {1: "l1-v1", 2: "l2-v3"}
    assert {str(t.level): len(t.entries) for t in opened.keyset.tables} == exp["table_sizes"]
    assert encode_tables(opened.keyset) == plaintext


@pytest.mark.parametrize("make_profile", [default_profile, v1_profile])
def test_round_trip_carries_every_level_at_the_profile_size(make_profile):
    profile = make_profile()
    keyset = make_keyset(profile, seed=3)
    sk, pk = generate_keypair()
    bundle = seal_v1(_header(profile, keyset), keyset, pk)
    opened = open_bundle(base64.b64encode(bundle).decode(), sk)
    assert opened.profile == profile
    assert [len(t.entries) for t in opened.keyset.tables] == [1 << lv.key_bits for lv in profile.levels]
    assert opened.keyset.tables == keyset.tables and opened.keyset.position == keyset.position
    assert opened.key_versions == {lv: f"l{lv}-v3" for lv in range(1, profile.depth + 1)}
    assert open_bundle(bundle, sk).bundle_id == opened.bundle_id  # raw bytes work too
    # nothing of the keys in its printed form
    text = repr(opened) + str(opened) + repr(opened.keyset)
    assert all(e.hex() not in text and str(e) not in text for t in keyset.tables for e in t.entries[:8])


@pytest.fixture
def sealed():
    profile = default_profile()
    keyset = make_keyset(profile)
    sk, pk = generate_keypair()
    return profile, keyset, sk, seal_v1(_header(profile, keyset), keyset, pk)


def test_wrong_private_key_does_not_open(sealed):
    *_, bundle = sealed
    other, _ = generate_keypair()
    with pytest.raises(BundleError, match="wrong private key"):
        open_bundle(bundle, other)
    with pytest.raises(BundleError, match="32-byte"):
        open_bundle(bundle, b"short")


@pytest.mark.parametrize("where", ["header", "enc", "nonce", "ciphertext", "tag"])
def test_any_altered_byte_is_refused(sealed, where):
    *_, sk, bundle = sealed
    (hlen,) = struct.unpack(">I", bundle[4:8])
    pos = {"header": 8 + hlen // 2, "enc": 8 + hlen + 5, "nonce": 8 + hlen + 32 + 3,
           "ciphertext": 8 + hlen + 44 + 100, "tag": len(bundle) - 1}[where]
    bad = bytearray(bundle)
    bad[pos] ^= 0x01
    with pytest.raises(BundleError):
        open_bundle(bytes(bad), sk)


def test_header_swap_is_refused(sealed):
    """A header rewritten to other versions (valid JSON) fails authentication: it is the AEAD's AAD."""
    _profile, _keyset, sk, bundle = sealed
    (hlen,) = struct.unpack(">I", bundle[4:8])
    hdr = bundle[8 : 8 + hlen].replace(b'"l1-v0"', b'"l1-v9"')
    assert hdr != bundle[8 : 8 + hlen]
    forged = bundle[:4] + struct.pack(">I", len(hdr)) + hdr + bundle[8 + hlen :]
    assert read_header(forged)["key_versions"]["1"] == "l1-v9"
    with pytest.raises(BundleError, match="wrong private key, or the bundle was altered"):
        open_bundle(forged, sk)


def test_truncated_garbage_and_expired(sealed):
    profile, keyset, sk, bundle = sealed
    for junk in (bundle[:40], b"HRB1", "not base64!", b"XXXX" + bundle[4:]):
        with pytest.raises(BundleError):
            open_bundle(junk, sk)
    past = datetime.now(UTC) - timedelta(seconds=1)
    pk = public_key_of(sk)
    old = seal_v1(_header(profile, keyset, expires=past), keyset, pk)
    with pytest.raises(BundleExpired):
        open_bundle(old, sk)
    assert open_bundle(old, sk, allow_expired=True).expired()
    fresh = open_bundle(bundle, sk)
    assert not fresh.expired() and fresh.expired(fresh.expires_at)


def test_tables_must_match_the_profile(sealed):
    """A bundle whose table sizes or versions disagree with its own header is refused after opening."""
    profile, keyset, sk, _ = sealed
    pk = public_key_of(sk)
    short = KeySet((keyset.tables[0], type(keyset.tables[1])(2, "l2-v0", keyset.tables[1].entries[:4])))
    with pytest.raises(BundleError, match=f"needs {1 << profile.levels[1].key_bits}"):
        open_bundle(seal_v1(_header(profile, short), short, pk), sk)
    hdr = _header(profile, keyset)
    hdr["key_versions"] = {"1": "l1-v0", "2": "l2-v7"}
    with pytest.raises(BundleError, match="key_versions"):
        open_bundle(seal_v1(hdr, keyset, pk), sk)


def test_public_key_parsing():
    _, pk = generate_keypair()
    assert parse_public_key(base64.b64encode(pk).decode()) == pk
    for bad in ("", "AAAA", base64.b64encode(b"x" * 31).decode(), base64.b64encode(bytes(32)).decode(), "%%%"):
        with pytest.raises(BundleError):
            parse_public_key(bad)


def test_docs_print_the_vector():
    doc = (Path(__file__).parents[2] / "docs" / "providers.md").read_text()
    v, exp = VECTOR["inputs"], VECTOR["expected"]
    for value in (v["recipient_private"], v["ephemeral_private"], v["nonce"], exp["recipient_public"],
                  exp["ephemeral_public"], exp["plaintext_sha256"], exp["bundle_sha256"]):
        assert f"`{value}`" in doc
