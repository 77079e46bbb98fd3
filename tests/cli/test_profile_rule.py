"""One profile per deployment: HERO_PROFILE honoured by `hero keys`, `hero generate` and
`hero decode` (the flag overrides); a new deployment gets NEW_DEPLOYMENT_PROFILE, an existing one keeps the
profile of its keys; `hero keys init` never silently adds a second profile."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from verifier.cli import main
from verifier.engine.profile import NEW_DEPLOYMENT_PROFILE
from verifier.keys.deployment import ProfileChoiceError, choose_profile

TEXT = "The committee met on Tuesday to discuss the budget for next year and the new library wing."


def run(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


@pytest.fixture
def env(hero_home, monkeypatch):
    for name in ("HERO_PROFILE", "HERO_URL", "HERO_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HERO_DEV_MODE", "1")  # a local KEK for the key store (outside dev mode: `hero kek init`)
    return monkeypatch


def test_choose_profile_rule():
    assert choose_profile(None, []) == NEW_DEPLOYMENT_PROFILE == "v5"  # spec v5: docs/evaluation/chat.md
    assert choose_profile(None, ["default"]) == "default"  # an existing deployment keeps its profile
    assert choose_profile(None, ["default", "v1"]) == "default"  # the spec v2 upgrade path: default served
    assert choose_profile("v1", ["default"]) == "v1"  # HERO_PROFILE / --profile decide
    with pytest.raises(ProfileChoiceError, match="hero profile use NAME"):
        choose_profile(None, ["v1", "v3"])


def test_keys_honour_hero_profile_and_refuse_a_silent_second_profile(env, capsys):
    code, (listed,), _ = run(capsys, "keys", "list")
    assert code == 0 and listed["deployment_profile"] == "v5" and listed["profiles"] == []
    env.setenv("HERO_PROFILE", "default")
    code, (made,), err = run(capsys, "keys", "init")
    assert code == 0 and made["profile"] == "default", err
    code, (listed,), _ = run(capsys, "keys", "list")
    assert listed["deployment_profile"] == "default" and listed["profile"] == "default"
    assert len(listed["versions"]) == 2
    env.delenv("HERO_PROFILE")
    code, (listed,), _ = run(capsys, "keys", "list")  # no HERO_PROFILE: the profile of the keys
    assert listed["deployment_profile"] == "default" and listed["profiles"] == ["default"]
    # HERO_PROFILE naming another profile: refused, it says so and asks for --profile
    env.setenv("HERO_PROFILE", "v3")
    code, out, err = run(capsys, "keys", "init")
    assert code == 2 and out == [] and "already has keys for profile 'default'" in err and "--profile v3" in err
    code, (made,), err = run(capsys, "keys", "init", "--profile", "v3")  # asked for by name: made, with a note
    assert code == 0 and made["profile"] == "v3" and "profiles default, v3" in err
    code, (listed,), _ = run(capsys, "keys", "list")
    assert listed["deployment_profile"] == "v3" and listed["profiles"] == ["default", "v3"]
    code, (listed,), _ = run(capsys, "keys", "list", "--profile", "default")
    assert listed["profile"] == "default" and listed["deployment_profile"] == "v3"


def test_decode_uses_hero_profile_and_the_flag_overrides(env, capsys):
    assert run(capsys, "keys", "init", "--profile", "default")[0] == 0
    assert run(capsys, "keys", "init", "--profile", "v3")[0] == 0
    spec = {}
    for setting, flag in (("v3", None), ("default", None), ("default", "v3"), (None, None)):
        if setting:
            env.setenv("HERO_PROFILE", setting)
        else:
            env.delenv("HERO_PROFILE", raising=False)
        code, (res,), err = run(capsys, "decode", "--local", "--text", TEXT, *(["--profile", flag] if flag else []))
        assert code == 0, err
        spec[(setting, flag)] = res["spec_version"]
    # v3 under HERO_PROFILE=v3 and under --profile v3; spec v2 `default` otherwise (it is among the keys)
    assert spec == {("v3", None): 3, ("default", None): 2, ("default", "v3"): 3, (None, None): 2}


def test_generate_uses_hero_profile(env, capsys, monkeypatch):
    """The payload is checked against HERO_PROFILE's fields (v3: an 8-bit model, default: 12 bits) and made with
    that profile's keys. The model is stubbed: the profile is what is tested."""
    import verifier.lm as lm
    import verifier.provider.generation as generation

    monkeypatch.setattr(lm, "load_model", lambda name: (None, None))
    seen = []

    def fake(model, tok, prompts, payloads, profile, keyset, **kw):
        seen.append(profile.name)
        return [SimpleNamespace(text=f"text about {p}", token_ids=[1, 2]) for p in prompts]

    monkeypatch.setattr(generation, "generate_watermarked", fake)
    assert run(capsys, "keys", "init", "--profile", "default")[0] == 0
    assert run(capsys, "keys", "init", "--profile", "v3")[0] == 0
    argv = ("generate", "--prompt", "Hi", "--field", "model=300", "--field", "user=1")
    env.setenv("HERO_PROFILE", "v3")
    code, _, err = run(capsys, *argv)
    assert code == 2 and "does not fit in 8 bits" in err
    env.setenv("HERO_PROFILE", "default")
    code, (gen,), err = run(capsys, *argv)
    assert code == 0 and gen["payload"] == {"model": 300, "user": 1} and gen["tokens"] == 2, err
    code, (gen,), err = run(capsys, *argv[:3], "--field", "model=30", "--field", "user=1", "--profile", "v3")
    assert code == 0 and seen == ["default", "v3"], err
    # --format text: the text alone, ready to paste (no JSON escapes)
    code = main(["generate", "--prompt", "Hi", "--field", "model=30", "--field", "user=1", "--format", "text"])
    assert code == 0 and capsys.readouterr().out == "text about Hi\n"


def test_remote_decode_refuses_a_profile_flag(env, capsys):
    env.setenv("HERO_URL", "http://127.0.0.1:9")
    env.setenv("HERO_TOKEN", "t")
    code, _, err = run(capsys, "decode", "--text", "x", "--profile", "v1")
    assert code == 2 and "--profile applies to a local decode" in err


def test_keys_init_models_makes_the_deployments_own_issued_copy(env, capsys, hero_home):
    """`hero keys init --models 37,41` (a new deployment): keys for `v5-deployment`, the shipped default's copy
    under $HERO_HOME/profiles that issues exactly those model ids; every later command finds it without a setting;
    generation refuses an id not issued; `hero profile issue` adds one (the list only grows)."""
    env.delenv("HERO_PROFILES_DIR", raising=False)
    code, (made,), err = run(capsys, "keys", "init", "--models", "37,41")
    assert code == 0 and made["profile"] == "v5-deployment", err
    path = hero_home / "profiles" / "v5-deployment.yaml"
    assert path.is_file()
    code, (listed,), _ = run(capsys, "keys", "list")
    assert listed["deployment_profile"] == "v5-deployment" and listed["profiles"] == ["v5-deployment"]
    from verifier.engine.payload import PayloadError, encode_payload
    from verifier.engine.profile import resolve_profile

    prof = resolve_profile("v5-deployment")
    assert prof.spec_version == 5 and prof.levels[0].issued == (37, 41) and prof.levels[0].searched == 2
    encode_payload(prof, {"model": 41, "user": 5})
    with pytest.raises(PayloadError):
        encode_payload(prof, {"model": 3, "user": 5})
    code, (issued,), _ = run(capsys, "profile", "issue", "v5-deployment", "42")
    assert code == 0 and issued["issued"] == [37, 41, 42]
    code, _out, err = run(capsys, "keys", "init", "--models", "37,x")
    assert code == 2 and "comma-separated model ids" in err and len(err.strip().splitlines()) == 1

