"""hero-bundle-3: bundles signed by the service and checked against the pinned service key.

Sealing alone authenticates nothing: anyone with a provider's public key can seal tables to it. These tests
play that attacker (tables of their own, any provider_id, a 10-year expiry, every format) against `open_bundle`
and `BundleSource`, and check that only a bundle signed by the pinned key, naming this provider, opens.
"""

from __future__ import annotations

import base64
import copy
import json
import pickle
import struct
from datetime import timedelta

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from tests.vectors.make_bundle_v2_vector import seal as seal_v2
from tests.vectors.make_bundle_vector import seal as seal_v1
from verifier.audit.transparency import raw_public, verifier_key
from verifier.engine.profile import default_profile
from verifier.provider import BundleError, BundleSource, generate_keypair, open_bundle, read_header
from verifier.provider.bundle import canonical_header, service_keys


@pytest.fixture(scope="module")
def setup():
    profile = default_profile()
    keyset = make_keyset(profile, seed=5)
    sk, pk = generate_keypair()
    return profile, keyset, sk, pk


def _attacker_forgeries(profile, pk) -> dict[str, bytes]:
    """Attacker tables sealed to the provider's public key: every format, another provider_id, a 10-year expiry,
    and a hero-bundle-3 signed with the attacker's own key (named as itself, then as the service's key)."""
    evil = make_keyset(profile, seed=66)
    hdr = bundles.header(profile, evil, provider_id="anyone", ttl=timedelta(days=3650))
    own = bundles.header(profile, evil, ttl=timedelta(days=3650))  # even naming the right provider
    attacker = Ed25519PrivateKey.generate()
    as_attacker = bundles.signed(own, evil, pk, signing_key=attacker, origin="evil.example/log")
    as_service = bundles.signed(own, evil, pk, signing_key=attacker, origin=bundles.ORIGIN)
    # the header rewritten to name the pinned key's id: the signature still is the attacker's
    (hlen,) = struct.unpack(">I", as_service[4:8])
    real_id = bundles.signer_id()
    h = json.loads(as_service[8 : 8 + hlen])
    h["signer"] = real_id
    new_hdr = canonical_header(h)
    renamed = as_service[:4] + struct.pack(">I", len(new_hdr)) + new_hdr + as_service[8 + hlen :]
    return {
        "v1 any provider": seal_v1(hdr, evil, pk),
        "v1 own provider": seal_v1(own, evil, pk),
        "v2 any provider": seal_v2(hdr, evil, pk),
        "v2 own provider": seal_v2(own, evil, pk),
        "v3 attacker key": as_attacker,
        "v3 attacker key, service origin": as_service,
        "v3 attacker signature, service key id": renamed,
    }


def test_signed_bundle_opens_with_the_pinned_key_and_names_its_signer(setup):
    profile, keyset, sk, pk = setup
    raw = bundles.signed(bundles.header(profile, keyset), keyset, pk)
    hdr = read_header(raw)
    assert hdr["format"] == "hero-bundle-3" and hdr["sig"] == "Ed25519" and hdr["signer"] == bundles.signer_id()
    opened = bundles.open_signed(base64.b64encode(raw).decode(), sk)
    assert opened.keyset.tables == keyset.tables and opened.provider_id == "acme"
    # the pin as a file (what GET /v1/audit/public-key answers, saved), or a list for a key rotation
    other = verifier_key("hero.test/old", raw_public(Ed25519PrivateKey.generate().public_key()))
    assert open_bundle(raw, sk, service_key=[other, bundles.SERVICE_VKEY], provider_id="acme").bundle_id


def test_pinned_key_from_a_file(setup, tmp_path):
    profile, keyset, sk, pk = setup
    path = tmp_path / "service.vkey"
    path.write_text(bundles.SERVICE_VKEY + "\n")
    raw = bundles.signed(bundles.header(profile, keyset), keyset, pk)
    assert open_bundle(raw, sk, service_key=path, provider_id="acme").key_versions
    for bad in ("", "not-a-key", tmp_path / "missing", []):
        with pytest.raises(BundleError):
            service_keys(bad)


def test_the_sdks_key_parser_agrees_with_the_logs(setup):
    """The SDK parses the published key itself (no service import); it must read exactly what the log writes."""
    from verifier.audit.transparency import NoteVerifier
    from verifier.provider.bundle import ServiceVerifierKey

    profile, keyset, sk, pk = setup
    for origin in ("hero.test/log", "hero-verifier.local/audit", "x"):
        key = Ed25519PrivateKey.generate()
        vkey = verifier_key(origin, raw_public(key.public_key()))
        ours, theirs = ServiceVerifierKey.parse(vkey), NoteVerifier.parse(vkey)
        assert (ours.name, ours.key_id) == (theirs.name, theirs.key_id)
        assert raw_public(ours.public_key) == raw_public(theirs.public_key)
        raw = bundles.signed(bundles.header(profile, keyset), keyset, pk, signing_key=key, origin=origin)
        assert open_bundle(raw, sk, service_key=theirs, provider_id="acme").keyset.tables == keyset.tables
    name, kid, b64 = bundles.SERVICE_VKEY.split("+", 2)
    for bad in (f"{name}+00000000+{b64}", f"{name}+{kid}", f"{name}+{kid}+AAAA", f"other+{kid}+{b64}"):
        with pytest.raises(BundleError):
            service_keys(bad)


def test_hybrid_key_type_is_signed_too(setup):
    profile, keyset, *_ = setup
    sk, pk = generate_keypair("mlkem768-x25519")
    raw = bundles.signed(bundles.header(profile, keyset), keyset, pk, key_type="mlkem768-x25519")
    assert bundles.open_signed(raw, sk).keyset.tables == keyset.tables


@pytest.mark.parametrize("name", ["v1 any provider", "v1 own provider", "v2 any provider", "v2 own provider",
                                  "v3 attacker key", "v3 attacker key, service origin",
                                  "v3 attacker signature, service key id"])
def test_forged_bundles_are_refused(setup, name):
    profile, _keyset, sk, pk = setup
    forged = _attacker_forgeries(profile, pk)[name]
    with pytest.raises(BundleError, match=r"unsigned bundle|signature is not valid"):
        bundles.open_signed(forged, sk)


def test_unsigned_formats_open_only_when_explicitly_allowed(setup):
    profile, keyset, sk, pk = setup
    v1 = seal_v1(bundles.header(profile, keyset), keyset, pk)
    with pytest.raises(BundleError, match=r"unsigned bundle \(hero-bundle-1\) refused"):
        bundles.open_signed(v1, sk)
    with pytest.raises(BundleError, match="service_key is required"):
        open_bundle(bundles.signed(bundles.header(profile, keyset), keyset, pk), sk, service_key=None,
                    provider_id="acme")
    assert open_bundle(v1, sk, service_key=None, provider_id="acme", allow_unsigned=True).keyset.tables == \
        keyset.tables
    # allowing unsigned bundles does not relax the provider check
    with pytest.raises(BundleError, match="another provider"):
        open_bundle(v1, sk, service_key=None, provider_id="other", allow_unsigned=True)


def test_a_service_signed_bundle_for_another_provider_is_refused(setup):
    profile, keyset, sk, pk = setup
    raw = bundles.signed(bundles.header(profile, keyset, provider_id="someone-else"), keyset, pk)
    with pytest.raises(BundleError, match="another provider"):
        bundles.open_signed(raw, sk)
    with pytest.raises(BundleError, match="provider_id"):
        open_bundle(raw, sk, service_key=bundles.SERVICE_VKEY, provider_id="")


def test_every_flipped_bit_region_is_refused(setup):
    profile, keyset, sk, pk = setup
    raw = bundles.signed(bundles.header(profile, keyset), keyset, pk)
    (hlen,) = struct.unpack(">I", raw[4:8])
    for pos in (2, 5, 8 + hlen // 2, 8 + hlen + 3, 8 + hlen + 40, len(raw) - 70, len(raw) - 30, len(raw) - 1):
        bad = bytearray(raw)
        bad[pos] ^= 0x04
        with pytest.raises(BundleError):
            bundles.open_signed(bytes(bad), sk)
    with pytest.raises(BundleError):
        bundles.open_signed(raw[:-1], sk)


def test_generation_bundle_refuses_pickle_and_copy_and_hides_keys(setup):
    profile, keyset, sk, pk = setup
    opened = bundles.open_signed(bundles.signed(bundles.header(profile, keyset), keyset, pk), sk)
    for dump in (pickle.dumps, lambda b: pickle.dumps(b, protocol=0), copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be pickled"):
            dump(opened)
    text = repr(opened) + str(opened)
    assert all(e.hex() not in text and repr(e) not in text for t in keyset.tables for e in t.entries[:16])


def _source(bundle_bytes: bytes, sk: bytes, token: str = "x.eyJzdWIiOiJhY21lIn0.y", **kw) -> BundleSource:
    """A BundleSource whose service (a mock transport) answers `bundle_bytes`; the token's sub is `acme`."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"bundle": base64.b64encode(bundle_bytes).decode(), "etag": "t"})

    client = httpx.Client(base_url="http://service.test", transport=httpx.MockTransport(answer))
    return BundleSource(sk, token, client=client, **kw)


def test_bundle_source_installs_only_signed_bundles_for_itself(setup):
    profile, keyset, sk, pk = setup
    good = bundles.signed(bundles.header(profile, keyset), keyset, pk)
    src = _source(good, sk, service_key=bundles.SERVICE_VKEY)
    assert src.refresh() and src.bundle.keyset.tables == keyset.tables  # provider id from the token's sub
    for name, forged in _attacker_forgeries(profile, pk).items():
        src = _source(forged, sk, service_key=bundles.SERVICE_VKEY)
        with pytest.raises(BundleError):
            src.refresh()
        assert src._bundle is None, name
    other = bundles.signed(bundles.header(profile, keyset, provider_id="fleet-9"), keyset, pk)
    with pytest.raises(BundleError, match="another provider"):
        _source(other, sk, service_key=bundles.SERVICE_VKEY).refresh()
    # an explicit provider_id wins over the token's sub
    assert _source(other, sk, service_key=bundles.SERVICE_VKEY, provider_id="fleet-9").refresh()


def test_bundle_source_needs_a_pinned_key_and_refuses_v1_unless_allowed(setup):
    profile, keyset, sk, pk = setup
    v1 = seal_v1(bundles.header(profile, keyset), keyset, pk)
    with pytest.raises(BundleError, match="service_key is required"):
        _source(v1, sk, service_key=None)
    with pytest.raises(BundleError, match="unsigned bundle"):
        _source(v1, sk, service_key=bundles.SERVICE_VKEY).refresh()
    assert _source(v1, sk, service_key=None, allow_unsigned=True).refresh()
