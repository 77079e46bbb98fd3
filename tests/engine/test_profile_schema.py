"""Profile files are checked key by key: a key a profile does not have is refused, named, at
every level of the mapping; every shipped profile loads and its `to_dict` round-trips."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from verifier.base.resources import project_root
from verifier.engine.profile import PROFILES_DIR, ProfileError, load_profile, profile_from_dict

ROOT = project_root()
SHIPPED = sorted([*PROFILES_DIR.glob("*.yaml"), *(ROOT / "research" / "profiles").rglob("*.yaml"),
                  *(ROOT / "deploy").rglob("profiles/*.yaml")])


def test_there_are_shipped_profiles():
    assert len(SHIPPED) >= 8 and any(p.name == "v5.yaml" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_profile_loads_and_round_trips(path: Path):
    profile = load_profile(path)
    again = profile_from_dict(profile.to_dict())
    assert again == profile and again.to_dict() == profile.to_dict()
    assert profile_from_dict(yaml.safe_load(yaml.safe_dump(profile.to_dict()))) == profile


def test_a_misspelt_top_level_key_is_refused_naming_it(tmp_path):
    path = tmp_path / "own.yaml"
    data = load_profile(PROFILES_DIR / "v3.yaml").to_dict()
    data.pop("tokenizer")
    data["tokeniser"] = "/var/lib/hero/tokenizers/own"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    assert str(refused.value) == "profile 'v3': unknown key 'tokeniser' (did you mean 'tokenizer'?)"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["levels"][0].update(chunk=20), "profile 'v3' level 1: unknown key 'chunk' (did you mean 'chunks'?)"),
    (lambda d: d["levels"][1]["fields"][0].update(width=3), "profile 'v3' level 2 field 'user': unknown key 'width'"),
    (lambda d: d.update(colour="red"), "profile 'v3': unknown key 'colour' (a profile's keys here: name, "),
])
def test_unknown_keys_at_each_level_are_refused_naming_them(edit, message):
    data = copy.deepcopy(load_profile(PROFILES_DIR / "v3.yaml").to_dict())
    edit(data)
    with pytest.raises(ProfileError) as refused:
        profile_from_dict(data)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_spec_v5_multiplex_still_refuses_its_unknown_keys():
    data = load_profile(PROFILES_DIR / "v5.yaml").to_dict()
    data["multiplex"]["publik"] = 30
    with pytest.raises(ProfileError, match=r"^profile 'v5': multiplex: unknown key 'publik'$"):
        profile_from_dict(data)


def test_every_key_to_dict_writes_is_accepted():
    """The optional keys too (revision, tokenizer_fingerprint, issued): what `hero profile new` writes loads."""
    data = load_profile(PROFILES_DIR / "v4.yaml").to_dict()
    data.update(tokenizer="acme/tok", revision="1" * 40, tokenizer_fingerprint="a" * 64)
    profile = profile_from_dict(data)
    assert profile_from_dict(profile.to_dict()) == profile and profile.tokenizer_revision == "1" * 40
