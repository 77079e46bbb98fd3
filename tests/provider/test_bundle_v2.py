"""hero-bundle-2 (RFC 9180 HPKE from `cryptography`): the frozen vector reproduced and opened by plain
`cryptography` calls following docs/providers.md, the library's bundles opened the same way, the hybrid
ML-KEM-768 + X25519 suite, and the ways a bundle must fail. No longer issued: the tests seal their own
(tests/vectors/make_bundle_v2_vector.py `seal`). hero-bundle-1 opens when asked (test_bundle.py); the signed
hero-bundle-3: test_bundle_signed.py (its HPKE part opens by the written spec here)."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric import mlkem, x25519

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from tests.provider.test_bundle import _header
from tests.vectors import rfc9180
from tests.vectors.make_bundle_v2_vector import seal as seal_v2
from tests.vectors.make_bundle_vector import seal as seal_v1
from verifier.engine.profile import default_profile
from verifier.provider import BundleError, generate_keypair, read_header
from verifier.provider import open_bundle as _open
from verifier.provider.bundle import encode_tables, parse_public_key, public_key_of

VECTOR = json.loads((Path(__file__).parents[1] / "vectors" / "bundle_v2.json").read_text())


def open_bundle(bundle, private_key, **kw):
    """The unsigned formats open only when asked (`allow_unsigned`; refusals and the provider check are in
    test_bundle_signed.py): here, their layout."""
    try:
        provider = read_header(bundle)["provider_id"]
    except (BundleError, KeyError):
        provider = "acme"
    return _open(bundle, private_key, service_key=None, provider_id=provider, allow_unsigned=True, **kw)


def _split(raw: bytes) -> tuple[dict, bytes, bytes]:
    """docs/providers.md: magic, u32be header length, header, then HPKE's enc || ct."""
    assert raw[:4] == b"HRB2"
    (hlen,) = struct.unpack(">I", raw[4:8])
    prefix = raw[: 8 + hlen]
    return json.loads(raw[8 : 8 + hlen]), prefix, raw[8 + hlen :]


def _info(prefix: bytes) -> bytes:
    return b"HeRo generation bundle v2\x00" + hashlib.sha256(prefix).digest()


def test_vector_is_reproduced_byte_for_byte_by_the_written_spec():
    from tests.vectors.make_bundle_v2_vector import build

    assert build(VECTOR["inputs"]) == VECTOR["expected"]


def test_vector_opens_by_plain_cryptography_calls_and_by_the_sdk():
    v, exp = VECTOR["inputs"], VECTOR["expected"]
    raw = base64.b64decode(exp["bundle_b64"])
    header, prefix, sealed = _split(raw)
    assert header["format"] == "hero-bundle-2" and header["key_type"] == "x25519"
    assert (header["kem"], header["kdf"], header["aead"]) == ("DHKEM(X25519, HKDF-SHA256)", "HKDF-SHA256",
                                                              "AES-256-GCM")
    assert _info(prefix).hex() == exp["info"]
    sk_r = bytes.fromhex(v["recipient_private"])
    by_rfc = rfc9180.open_(sk_r, _info(prefix), sealed)  # the RFC, step by step
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
    by_lib = suite.decrypt(sealed, x25519.X25519PrivateKey.from_private_bytes(sk_r), info=_info(prefix))
    assert by_rfc == by_lib and hashlib.sha256(by_rfc).hexdigest() == exp["plaintext_sha256"]
    opened = open_bundle(exp["bundle_b64"], sk_r)
    assert opened.key_versions == {1: "l1-v1", 2: "l2-v3"} and encode_tables(opened.keyset) == by_rfc
    assert read_header(exp["bundle_b64"])["bundle_id"] == v["header"]["bundle_id"]


def test_service_bundles_open_by_the_written_spec():
    """What the service issues (`hero-bundle-3`: v2's HPKE seal under its own `info`, then the signature) opens
    with the RFC written out, as docs/providers.md describes it."""
    profile = default_profile()
    keyset = make_keyset(profile, seed=3)
    sk, pk = generate_keypair()
    raw = bundles.signed(_header(profile, keyset), keyset, pk)
    assert raw[:4] == b"HRB3"
    (hlen,) = struct.unpack(">I", raw[4:8])
    prefix, sealed = raw[: 8 + hlen], raw[8 + hlen : -64]
    info = b"HeRo generation bundle v3\x00" + hashlib.sha256(prefix).digest()
    assert rfc9180.open_(sk, info, sealed) == encode_tables(keyset)
    assert bundles.signed(_header(profile, keyset), keyset, pk)[8 + hlen : -64] != sealed  # a fresh ephemeral key


def test_hybrid_mlkem768_x25519_round_trip_and_plain_decrypt():
    profile = default_profile()
    keyset = make_keyset(profile, seed=5)
    sk, pk = generate_keypair("mlkem768-x25519")
    assert (len(sk), len(pk)) == (96, 1216) and public_key_of(sk) == pk
    assert parse_public_key(base64.b64encode(pk).decode(), "mlkem768-x25519") == pk
    raw = seal_v2(_header(profile, keyset), keyset, pk, key_type="mlkem768-x25519")
    header, prefix, sealed = _split(raw)
    assert header["key_type"] == "mlkem768-x25519" and header["kem"] == "MLKEM768-X25519"
    assert len(sealed) == hpke.KEM.MLKEM768_X25519.enc_length() + len(encode_tables(keyset)) + 16
    # docs/providers.md: the private key is the ML-KEM-768 seed (64) || the X25519 private key (32)
    key = hpke.MLKEM768X25519PrivateKey(mlkem.MLKEM768PrivateKey.from_seed_bytes(sk[:64]),
                                        x25519.X25519PrivateKey.from_private_bytes(sk[64:]))
    suite = hpke.Suite(hpke.KEM.MLKEM768_X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
    assert suite.decrypt(sealed, key, info=_info(prefix)) == encode_tables(keyset)
    opened = open_bundle(base64.b64encode(raw).decode(), sk)
    assert [t.entries for t in opened.keyset.tables] == [t.entries for t in keyset.tables]
    other_x, _ = generate_keypair()
    with pytest.raises(BundleError):
        open_bundle(raw, other_x)  # an X25519 key cannot open a hybrid bundle
    with pytest.raises(BundleError):
        open_bundle(raw, generate_keypair("mlkem768-x25519")[0])


def test_altered_bundle_header_or_ciphertext_does_not_open():
    profile = default_profile()
    keyset = make_keyset(profile, seed=7)
    sk, pk = generate_keypair()
    raw = seal_v2(_header(profile, keyset), keyset, pk)
    header, prefix, _ = _split(raw)
    forged = json.dumps({**header, "expires_at": "2199-01-01T00:00:00+00:00"}, sort_keys=True,
                        separators=(",", ":")).encode()
    altered = [
        b"HRB2" + struct.pack(">I", len(forged)) + forged + raw[len(prefix):],  # header changed: info differs
        raw[:-1] + bytes([raw[-1] ^ 1]),  # tag
        raw[: len(prefix) + 5] + bytes([raw[len(prefix) + 5] ^ 1]) + raw[len(prefix) + 6 :],  # enc
        raw[: len(prefix) + 20],  # truncated
    ]
    for bad in altered:
        with pytest.raises(BundleError):
            open_bundle(bad, sk)
    with pytest.raises(BundleError):
        parse_public_key(base64.b64encode(b"\0" * 1216).decode(), "mlkem768-x25519")


def test_bundle_v1_still_opens_next_to_v2():
    profile = default_profile()
    keyset = make_keyset(profile, seed=9)
    sk, pk = generate_keypair()
    v1 = seal_v1(_header(profile, keyset), keyset, pk)
    assert read_header(v1)["format"] == "hero-bundle-1"
    assert open_bundle(v1, sk).key_versions == open_bundle(seal_v2(_header(profile, keyset), keyset, pk),
                                                           sk).key_versions
