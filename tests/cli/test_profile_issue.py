"""Spec v4's issued values as a deployment manages them: `hero profile new NAME --from v4 --issued ...` writes the
deployment's profile, `hero profile issue NAME VALUE` appends a newly issued model id. Generation refuses a value
not issued; a text made before an issue keeps decoding to its value, its level corrected for the larger count."""

from __future__ import annotations

import pytest
import yaml

from tests.cli.test_profile_tokenizer import _cli, _watermarked_ids


def _fields(res: dict) -> dict:
    return {k: v for lv in res["levels"] for k, v in (lv.get("fields") or {}).items()}


@pytest.mark.slow
def test_issue_a_new_model_id_and_keep_decoding_earlier_texts(tmp_path, monkeypatch, capsys):
    from verifier.engine.payload import PayloadError
    from verifier.lm import load_tokenizer
    from verifier.offline import LocalHero

    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    code, out, err = _cli(capsys, "profile", "new", "acme", "--from", "v4", "--issued", "37", "37")
    assert code == 0, err
    assert out["issued"] == [37] and out["tokenizer"] == "smollm2"
    code, out, err = _cli(capsys, "keys", "init", "--profile", "acme")
    assert code == 0, err
    tokenizer = load_tokenizer("smollm2")

    with LocalHero(profile="acme") as hero:
        keyset = hero.store.active_keyset(hero.profile)
        text = tokenizer.decode(_watermarked_ids(hero.profile, keyset, {"model": 37, "user": 99}, tokenizer))
        with pytest.raises(PayloadError, match="issued"):
            _watermarked_ids(hero.profile, keyset, {"model": 41, "user": 99}, tokenizer, n=2)
        (before,) = hero.decode([text], max_level=1)
    assert _fields(before) == {"model": 37} and before["levels"][0]["searched"] == 1

    code, out, err = _cli(capsys, "profile", "issue", "acme", "41", "37")
    assert code == 0, err
    assert out["issued"] == [37, 41] and out["added"] == [41] and out["already_issued"] == [37]
    with LocalHero(profile="acme") as hero:
        keyset = hero.store.active_keyset(hero.profile)
        text41 = tokenizer.decode(_watermarked_ids(hero.profile, keyset, {"model": 41, "user": 5}, tokenizer))
        after, new = hero.decode([text, text41], max_level=1)
    assert _fields(after) == {"model": 37} and after["levels"][0]["searched"] == 2
    assert _fields(new) == {"model": 41}
    # the correction is the count: two searched values where one was
    assert after["levels"][0]["p_value"] >= before["levels"][0]["p_value"]


def test_issue_refuses_shipped_profiles_a_missing_list_and_out_of_range_values(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    code, _, err = _cli(capsys, "profile", "issue", "v4", "41")
    assert code != 0 and "HERO_PROFILES_DIR" in err and "\n" not in err.strip()
    code, _, err = _cli(capsys, "profile", "new", "acme", "--from", "v4", "--issued", "1")
    assert code == 0, err
    path = tmp_path / "profiles" / "acme.yaml"
    code, _, err = _cli(capsys, "profile", "issue", "acme", "256")  # the model field is 8 bits
    assert code != 0 and "0..255" in err
    assert yaml.safe_load(path.read_text())["levels"][0]["issued"] == [1]  # a refused issue leaves the file as it was
    code, _, err = _cli(capsys, "profile", "issue", "acme", "2", "--field", "user")
    assert code != 0 and "no issued values" in err
    code, _, err = _cli(capsys, "profile", "new", "old", "--from", "v3", "--issued", "1")
    assert code != 0 and "spec_version 4" in err
    code, _, err = _cli(capsys, "profile", "new", "bare", "--from", "v4")
    assert code != 0 and "--issued" in err
