"""Bundles never go back: a replayed older signed bundle is refused and logged, the newer one stays.

Before (7ed75c2) `BundleSource` installed any bundle the pinned key signed for this provider: replaying the
`l1-v1` bundle after a rotation to `l1-v2` (and `l1-v1` disabled) rolled the provider back for up to the
bundle's 24 h; `refresh()` returned True and `bundle.key_versions` named `l1-v1` again."""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.helpers import bundles
from tests.helpers.keys import make_keyset
from verifier.engine.profile import default_profile
from verifier.provider import BundleSource, generate_keypair
from verifier.provider.refresh import version_number


def _bundle(profile, keyset, pk, *, issued: datetime, bundle_id: str) -> bytes:
    hdr = bundles.header(profile, keyset, bundle_id=bundle_id)
    hdr["issued_at"] = issued.isoformat()
    hdr["expires_at"] = (issued + timedelta(hours=24)).isoformat()
    hdr["etag"] = bundle_id[:8]
    return bundles.signed(hdr, keyset, pk)


@pytest.fixture
def fleet():
    profile = default_profile()
    sk, pk = generate_keypair()
    answers: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"bundle": base64.b64encode(answers.pop(0)).decode(), "etag": "t"})

    client = httpx.Client(base_url="http://service.test", transport=httpx.MockTransport(answer))
    src = BundleSource(sk, "x.eyJzdWIiOiJhY21lIn0.y", client=client, service_key=bundles.SERVICE_VKEY,
                       provider_id=bundles.PROVIDER)
    return profile, pk, answers, src


def test_a_replayed_older_bundle_is_refused_and_logged(fleet, caplog):
    profile, pk, answers, src = fleet
    now = datetime.now(UTC).replace(microsecond=0)
    v1, v2 = make_keyset(profile, seed=1), make_keyset(profile, seed=2)
    old = _bundle(profile, v1, pk, issued=now - timedelta(hours=2), bundle_id="1" * 32)
    new = _bundle(profile, v2, pk, issued=now - timedelta(hours=1), bundle_id="2" * 32)
    answers += [old, new, old]
    assert src.refresh() and src.refresh()
    assert src.current.key_versions[1] == "l1-v2"
    with caplog.at_level(logging.WARNING, logger="hero.provider"):
        assert src.refresh() is False  # the replay
    assert src.current.key_versions[1] == "l1-v2" and src.current.bundle_id == "2" * 32
    assert "never goes back" in src.refused and "never goes back" in caplog.text


def test_an_older_key_version_is_refused_even_when_issued_later(fleet):
    """A bundle re-signed later but naming an older version of a level (a service restored from a backup, say)
    goes back too: the versions count, not only the time."""
    profile, pk, answers, src = fleet
    now = datetime.now(UTC).replace(microsecond=0)
    answers += [_bundle(profile, make_keyset(profile, seed=3), pk, issued=now - timedelta(hours=1), bundle_id="3" * 32),
                _bundle(profile, make_keyset(profile, seed=2), pk, issued=now, bundle_id="4" * 32),
                _bundle(profile, make_keyset(profile, seed=4), pk, issued=now, bundle_id="5" * 32)]
    assert src.refresh()
    assert src.refresh() is False and "version 'l1-v2' is older" in src.refused
    assert src.refresh() and src.current.key_versions[1] == "l1-v4"  # forward again: installed


def test_version_numbers():
    assert [version_number(n) for n in ("l1-v1", "l12-v30", "l1-vx", "l1-v\u00b2", "nope")] == [1, 30, None, None, None]
