"""Key-time pinning: the key store records the profile's tokenizer fingerprint (over the parsed
vocabulary, RFC 8785) and the profile's digest whenever keys are made (`hero keys init`, `POST /v1/keys/init`, a
rotation); decoding with another tokenizer is refused in one line naming both fingerprints; a re-serialised but
identical tokenizer.json is accepted; a profile stores a local tokenizer relative to its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.test_profile_tokenizer import (
    _cli,
    _copy_tokenizer,
    _smollm2_tokenizer_dir,
    _swap_two_tokens,
    _watermarked_ids,
)
from verifier.base.errors import TokenizerMismatch
from verifier.cli import main
from verifier.engine.profile import profile_digest, resolve_profile
from verifier.keys.errors import KeyTokenizerMismatch
from verifier.lm import legacy_tokenizer_fingerprint, tokenizer_fingerprint

# A profile written by hand, as overlays/own-profile's: spec v3 on a local tokenizer, no tokenizer_fingerprint.
OWN = {"name": "own", "spec_version": 3, "tokenizer": "./tok", "vocab_size": 49152, "context_width": 3,
       "segments": 4, "routing": "contiguous",
       "levels": [{"bits": 2, "chunks": 80, "encoding": "value", "fields": [{"name": "model", "bits": 8}]},
                  {"bits": 3, "encoding": "value", "fields": [{"name": "user", "bits": 12}]}]}


def _own(tmp_path: Path, monkeypatch) -> Path:
    """profiles/own.yaml naming ./tok (SmolLM2's tokenizer files) beside it; HERO_PROFILES_DIR set."""
    profiles = tmp_path / "profiles"
    _copy_tokenizer(_smollm2_tokenizer_dir(), profiles / "tok")
    (profiles / "own.yaml").write_text(yaml.safe_dump(OWN, sort_keys=False))
    monkeypatch.setenv("HERO_PROFILES_DIR", str(profiles))
    monkeypatch.setenv("HERO_DEV_MODE", "1")  # the CLI mints the KEK of this test's store
    return profiles


def _reserialise(folder: Path) -> None:
    """The same tokenizer.json written another way: indented, ASCII-escaped, keys sorted, merges as "a b"."""
    data = json.loads((folder / "tokenizer.json").read_text())
    merges = data["model"]["merges"]
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in merges]
    (folder / "tokenizer.json").write_text(json.dumps(data, indent=1, ensure_ascii=True, sort_keys=True))


def test_fingerprint_is_over_the_parsed_vocabulary(tmp_path):
    a = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "a")
    b = _copy_tokenizer(a, tmp_path / "b")
    _reserialise(b)
    assert (a / "tokenizer.json").read_bytes() != (b / "tokenizer.json").read_bytes()
    assert tokenizer_fingerprint(str(a)) == tokenizer_fingerprint(str(b))
    assert legacy_tokenizer_fingerprint(str(a)) != legacy_tokenizer_fingerprint(str(b))  # what the bytes gave
    c = _swap_two_tokens(_copy_tokenizer(a, tmp_path / "c"))
    assert tokenizer_fingerprint(str(c)) != tokenizer_fingerprint(str(a))


def test_a_profile_recording_the_legacy_byte_fingerprint_still_decodes(tmp_path, monkeypatch):
    """Profiles `hero profile new` wrote before the parsed fingerprint record the bytes' SHA-256: still accepted
    while the bytes are unchanged."""
    from verifier.lm import check_profile_tokenizer, load_tokenizer

    profiles = _own(tmp_path, monkeypatch)
    tok = profiles / "tok"
    (profiles / "own.yaml").write_text(yaml.safe_dump({**OWN, "tokenizer_fingerprint":
                                                       legacy_tokenizer_fingerprint(str(tok))}))
    check_profile_tokenizer(resolve_profile("own"), load_tokenizer(str(tok)))
    _swap_two_tokens(tok)
    with pytest.raises(TokenizerMismatch, match="fingerprint"):
        check_profile_tokenizer(resolve_profile("own"), load_tokenizer(str(tok)))


def test_keys_init_pins_a_hand_written_profile_and_decode_refuses_swapped_ids(tmp_path, monkeypatch, capsys):
    from verifier.lm import load_tokenizer
    from verifier.offline import LocalHero

    profiles = _own(tmp_path, monkeypatch)
    tok = profiles / "tok"
    before = (profiles / "own.yaml").read_text()
    code, _, err = _cli(capsys, "keys", "init", "--profile", "own")
    assert code == 0, err
    assert (profiles / "own.yaml").read_text() == before  # the profile file is never written (a ConfigMap)
    pinned = tokenizer_fingerprint(str(tok))
    code, out, err = _cli(capsys, "keys", "list", "--profile", "own")
    assert code == 0 and {v["tokenizer_fingerprint"] for v in out["versions"]} == {pinned}, err
    with LocalHero(profile="own") as hero:
        assert hero.profile.tokenizer == str(tok.resolve()) and hero.profile.to_dict()["tokenizer"] == "./tok"
        rows = hero.store.version_rows(hero.profile)
        assert {(r.tokenizer_fingerprint, r.profile_digest) for r in rows} == {(pinned, profile_digest(hero.profile))}
        tokenizer = load_tokenizer(str(tok))
        ids = _watermarked_ids(hero.profile, hero.store.active_keyset(hero.profile), {"model": 5, "user": 777},
                               tokenizer)
        text = tokenizer.decode(ids)
    assert main(["keys", "rotate", "--profile", "own", "--level", "2"]) == 0  # a rotation records it too
    capsys.readouterr()

    _reserialise(tok)  # the same tokenizer written another way: accepted
    with LocalHero(profile="own") as hero:
        assert {r.tokenizer_fingerprint for r in hero.store.version_rows(hero.profile)} == {pinned}
        (res,) = hero.decode([text], max_level=2)
    fields = {k: v for lv in res["levels"] for k, v in (lv.get("fields") or {}).items()}
    assert res["watermarked"] and fields.get("user") == 777 and fields.get("model") == 5

    _swap_two_tokens(tok)  # ids swapped: refused in one line naming both fingerprints
    swapped = tokenizer_fingerprint(str(tok))
    with LocalHero(profile="own") as hero, pytest.raises(KeyTokenizerMismatch) as refused:
        hero.decode([text], max_level=2)
    message = str(refused.value)
    assert "\n" not in message and pinned in message and swapped in message and "'own'" in message
    assert isinstance(refused.value, TokenizerMismatch)
    code, _, err = _cli(capsys, "keys", "rotate", "--profile", "own", "--level", "1")  # no keys on it either
    assert code != 0 and pinned in err and swapped in err and len(err.strip().splitlines()) == 1


def test_api_keys_init_and_rotate_record_the_pins(tmp_path, monkeypatch, sqlite_url, make_service):
    _own(tmp_path, monkeypatch)
    tok = tmp_path / "profiles" / "tok"
    svc = make_service(sqlite_url, profile="own")
    admin = svc.auth("admin")
    r = svc.client.post("/v1/keys/init", headers=admin)
    assert r.status_code == 201, r.text
    pinned = tokenizer_fingerprint(str(tok))
    digest = profile_digest(resolve_profile("own"))
    assert {(v["tokenizer_fingerprint"], v["profile_digest"]) for v in r.json()["versions"]} == {(pinned, digest)}
    r = svc.client.post("/v1/keys/1/rotate", headers=admin)
    assert r.status_code == 201 and r.json()["tokenizer_fingerprint"] == pinned
    _swap_two_tokens(tok)
    r = svc.client.post("/v1/keys/1/rotate", headers=admin)
    assert r.status_code == 409 and pinned in r.json()["detail"], r.text
    with pytest.raises(KeyTokenizerMismatch):
        svc.ctx.store.check_tokenizer(svc.ctx.profile)


def test_built_in_tokenizers_record_the_profile_digest_only(lite):
    listing = lite.init_keys()
    assert {(v["tokenizer_fingerprint"], v["profile_digest"]) for v in listing["versions"]} == {
        (None, profile_digest(lite.ctx.profile))}


def test_profile_new_writes_a_local_tokenizer_relative_to_the_profiles_folder(tmp_path, monkeypatch, capsys):
    tok = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "tokenizers" / "mine")
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    code, out, err = _cli(capsys, "profile", "new", "mine", "--from", "v4", "--tokenizer", str(tok))
    assert code == 0, err
    written = yaml.safe_load(Path(out["path"]).read_text())
    assert written["tokenizer"] == "../tokenizers/mine"
    assert resolve_profile("mine").tokenizer == str(tok.resolve())
    # the folder and its tokenizers move together: the profile still finds it
    moved = tmp_path / "moved"
    (tmp_path / "profiles").rename(tmp_path / "elsewhere")
    moved.mkdir()
    (tmp_path / "elsewhere").rename(moved / "profiles")
    (tmp_path / "tokenizers").rename(moved / "tokenizers")
    monkeypatch.setenv("HERO_PROFILES_DIR", str(moved / "profiles"))
    assert resolve_profile("mine").tokenizer == str((moved / "tokenizers" / "mine").resolve())
    # a copy in the same folder keeps the relative path; `profile issue` rewrites it unchanged
    code, out, err = _cli(capsys, "profile", "new", "mine2", "--from", "mine", "--issued", "3")
    assert code == 0 and yaml.safe_load(Path(out["path"]).read_text())["tokenizer"] == "../tokenizers/mine", err
    code, out, err = _cli(capsys, "profile", "issue", "mine", "250")
    assert code == 0 and yaml.safe_load(Path(out["path"]).read_text())["tokenizer"] == "../tokenizers/mine", err
