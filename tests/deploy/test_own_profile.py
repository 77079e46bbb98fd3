"""The worked example of docs/operations.md ("A provider's own profile in the cluster"), on what its pods would
see: the profile from the rendered hero-profiles ConfigMap under HERO_PROFILES_DIR, HERO_PROFILE from hero-config,
the tokenizer at the hero-tokenizers volume's mount path (a temporary directory stands for the volume). `hero keys
init` and a decode to the exact user run unchanged; a tokenizer whose ids were swapped later is refused, for the
hand-written profile (the key store pinned it at `hero keys init`) as for one `hero profile new` wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_kubernetes import _one, _pod, _render
from verifier.cli import main

pytestmark = pytest.mark.slow  # converts SmolLM2's tokenizer (about 20 s) for the provider's "own" tokenizer


def _pods_view(tmp_path: Path, monkeypatch) -> tuple[Path, str]:
    """Lay out what the API pod of overlays/own-profile reads; returns (profiles dir, profile name)."""
    from verifier.lm import load_tokenizer

    objs = _render("own-profile")
    config = _one(objs, "ConfigMap", "hero-config")["data"]
    pod = _pod(objs, "Deployment", "hero-api")
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in pod["containers"][0]["volumeMounts"]
               if volumes[m["name"]].get("persistentVolumeClaim", {}).get("claimName") == "hero-tokenizers"]
    volume = tmp_path / "volume"  # the PVC's content, as tokenizer-loader.yaml's `kubectl cp` leaves it
    load_tokenizer("smollm2").save_pretrained(volume / "own")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name, text in _one(objs, "ConfigMap", "hero-profiles")["data"].items():
        (profiles / name).write_text(text.replace(mount["mountPath"], str(volume)))
    monkeypatch.setenv("HERO_PROFILES_DIR", str(profiles))
    monkeypatch.setenv("HERO_PROFILE", config["HERO_PROFILE"])
    return profiles, config["HERO_PROFILE"]


def _cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out.splitlines()[-1]) if out.strip() else None), err


def test_the_own_profile_overlay_runs_keys_init_and_decodes_its_user(tmp_path, monkeypatch, capsys):
    from tests.cli.test_profile_tokenizer import _swap_two_tokens, _watermarked_ids
    from verifier.lm import TokenizerMismatch, load_tokenizer
    from verifier.offline import LocalHero

    profiles, name = _pods_view(tmp_path, monkeypatch)
    profile_file = yaml.safe_load((profiles / f"{name}.yaml").read_text())
    tok_dir = Path(profile_file["tokenizer"])
    code, _, err = _cli(capsys, "kek", "init")  # the deployment's KEK, made once (docs/operations.md)
    assert code == 0, err
    code, out, err = _cli(capsys, "keys", "init", "--profile", name)  # step 4
    assert code == 0 and out["profile"] == name, err
    with LocalHero(profile=name) as hero:
        tokenizer = load_tokenizer(str(tok_dir))
        ids = _watermarked_ids(hero.profile, hero.store.active_keyset(hero.profile), {"model": 5, "user": 777},
                               tokenizer)
        text = tokenizer.decode(ids)
        (res,) = hero.decode([text], max_level=2)
    fields = {k: v for lv in res["levels"] for k, v in (lv.get("fields") or {}).items()}
    assert res["watermarked"] and fields.get("user") == 777 and fields.get("model") == 5

    # step 1 as documented: `hero profile new` records the fingerprint; the path is then the in-cluster one
    code, out, err = _cli(capsys, "profile", "new", "pinned", "--from", name, "--tokenizer", str(tok_dir))
    assert code == 0 and len(out["tokenizer_fingerprint"]) == 64, err
    code, _, err = _cli(capsys, "keys", "init", "--profile", "pinned")
    assert code == 0, err
    _swap_two_tokens(tok_dir)  # the volume now holds a tokenizer whose ids were swapped
    with LocalHero(profile="pinned") as hero, pytest.raises(TokenizerMismatch) as refused:
        hero.decode([text], max_level=2)
    assert "\n" not in str(refused.value) and "fingerprint" in str(refused.value)
    # the hand-written profile too: its keys were pinned by the key store at `hero keys init`
    with LocalHero(profile=name) as hero, pytest.raises(TokenizerMismatch) as refused:
        hero.decode([text], max_level=2)
    assert "\n" not in str(refused.value) and "the keys were made with tokenizer fingerprint" in str(refused.value)
