"""A profile's pinned hub `revision` reaches the model loads, not only the tokenizer's: model-aware scoring
(verifier/verify/scoring.py) and `hero generate`'s model (LocalHero.model) load the profile's LM at that revision.
The loaders are stand-ins: no network and no weights."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers.keys import make_keyset
from verifier.engine.decoder import Decoder
from verifier.engine.profile import resolve_profile

PIN = "1" * 40


class Loaded(Exception):
    """Raised by the stand-in loader once it has recorded its call (the test needs no model)."""


def _pinned_profile():
    return dataclasses.replace(resolve_profile("v3"), tokenizer="acme/model", tokenizer_revision=PIN)


def test_model_aware_scoring_loads_the_profiles_model_at_its_pinned_revision(monkeypatch):
    from verifier.verify.scoring import model_aware_scorer

    calls = []

    def load_model(name="smollm2", device="cpu", revision=None):
        calls.append((name, device, revision))
        raise Loaded

    monkeypatch.setattr("verifier.lm.load_model", load_model)
    profile = _pinned_profile()
    ks = make_keyset(profile)
    decoder = Decoder(profile, {t.level: [t] for t in ks.tables})
    scorer = model_aware_scorer(True, "cpu")
    with pytest.raises(Loaded):
        scorer.decode_ids(decoder, [[5, 6, 7, 8, 9, 10]])
    assert calls == [("acme/model", "cpu", PIN)]
    # an unpinned profile (a built-in, or a local directory) loads as before, without a revision argument
    calls.clear()
    unpinned = dataclasses.replace(profile, tokenizer="smollm2", tokenizer_revision=None)
    with pytest.raises(Loaded):
        scorer.decode_ids(Decoder(unpinned, {t.level: [t] for t in ks.tables}), [[5, 6, 7, 8, 9, 10]])
    assert calls == [("smollm2", "cpu", None)]


def test_the_revision_reaches_the_hub_lookup_of_load_model(monkeypatch):
    """verifier.lm.load_model resolves a hub id at the revision given (the snapshot lookup is a stand-in that
    finds nothing: the one-line error names the revision)."""
    import huggingface_hub

    from verifier import lm

    asked = []

    def snapshot_download(repo_id, revision=None, **kw):
        asked.append((repo_id, revision))
        raise FileNotFoundError("not in the local cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ValueError, match=f"acme/model.*at revision '{PIN}'") as info:
        lm.load_model("acme/model", "cpu", revision=PIN)
    assert asked == [("acme/model", PIN)] and "\n" not in str(info.value)


def test_local_generation_loads_the_profiles_model_at_its_pinned_revision(monkeypatch):
    """`hero generate` (LocalHero.model, default the profile's tokenizer's model) passes the profile's revision;
    another model named with --model is not the profile's, so it gets none."""
    from verifier.offline import LocalHero

    calls = []
    monkeypatch.setattr("verifier.lm.load_model", lambda name, revision=None: calls.append((name, revision))
                        or (name, None))
    hero = LocalHero.__new__(LocalHero)  # no key store: only the model loading is under test
    hero.profile, hero.progress, hero._models = _pinned_profile(), lambda _m: None, {}
    assert hero.model("acme/model") == ("acme/model", None)
    hero.model("smollm2")
    assert calls == [("acme/model", PIN), ("smollm2", None)]
