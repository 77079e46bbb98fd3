"""Moving a deployment to another profile is one step (`hero profile use NAME`), and the service
keeps decoding the texts made under the profiles it served before: each result names the profile that matched,
its p-values corrected for the profiles tried."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_profile_tokenizer import _watermarked_ids
from verifier.cli import main
from verifier.engine.profile import resolve_profile

pytestmark = pytest.mark.slow


def _cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out.splitlines()[-1]) if out.strip() else None), err


def _verify(svc, texts: list[str], role: str = "auditor") -> list[dict]:
    r = svc.client.post("/v1/verify", headers=svc.auth(role), json={"texts": texts})
    assert r.status_code == 200, r.text
    return r.json()["results"]


@pytest.fixture
def deployment(hero_home, monkeypatch, make_service):
    """A deployment as a user has one: the CLI and the service on HERO_HOME's database, no HERO_PROFILE."""
    from verifier.base.settings import Settings

    for name in ("HERO_PROFILE", "HERO_URL", "HERO_TOKEN", "HERO_PROFILES_DIR", "HERO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HERO_DEV_MODE", "1")
    url = Settings(home=hero_home).db_url
    return lambda: make_service(url, profile=None)


def test_a_v3_deployment_moved_to_v5_keeps_decoding_its_v3_texts(deployment, capsys):
    from verifier.lm import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    code, made, err = _cli(capsys, "keys", "init", "--profile", "v3")
    assert code == 0 and made["profile"] == "v3", err
    svc = deployment()
    assert svc.ctx.profile.name == "v3"  # the profile of its keys
    v3 = svc.ctx.profile
    old = tokenizer.decode(_watermarked_ids(v3, svc.ctx.store.active_keyset(v3), {"model": 37, "user": 99},
                                            tokenizer))
    (before,) = _verify(svc, [old])
    assert before["watermarked"] and before["profile"] == "v3" and before["spec_version"] == 3

    # one step: keys for v5 and the choice recorded with them
    code, used, err = _cli(capsys, "profile", "use", "v5")
    assert code == 0, err
    assert used["profile"] == "v5" and used["before"] is None and used["profiles"] == ["v3", "v5"]
    assert used["created"] == ["l1-v1", "l2-v1"]
    code, listed, err = _cli(capsys, "keys", "list")
    assert code == 0 and listed["deployment_profile"] == "v5", err  # every command agrees, no HERO_PROFILE

    # the running service follows the recorded choice (read again before a decode is admitted)
    svc.ctx.next_follow = 0.0
    (after,) = _verify(svc, [old])
    assert svc.ctx.profile.name == "v5"
    assert after["watermarked"] and after["profile"] == "v3" and after["spec_version"] == 3
    assert [lv["fields"] for lv in after["levels"]] == [lv["fields"] for lv in before["levels"]]
    # Bonferroni over the 2 profiles tried: every p-value doubled (capped at 1)
    assert after["p_value"] == pytest.approx(min(1.0, 2 * before["p_value"]), rel=1e-9, abs=1e-300)
    for a, b in zip(after["levels"], before["levels"], strict=True):
        assert a["p_value"] == pytest.approx(min(1.0, 2 * b["p_value"]), rel=1e-9, abs=1e-300)

    # a new v5 text names v5; a restarted service (a new process) serves v5 too
    fresh = deployment()
    assert fresh.ctx.profile.name == "v5"
    v5 = resolve_profile("v5")
    new = tokenizer.decode(_watermarked_ids(v5, fresh.ctx.store.active_keyset(v5), {"model": 2, "user": 5},
                                            tokenizer))
    old_again, new_res, human = _verify(fresh, [old, new, "The committee met on Tuesday to discuss the budget "
                                                          "for next year and the new library wing."])
    assert old_again["watermarked"] and old_again["profile"] == "v3"
    assert new_res["watermarked"] and new_res["profile"] == "v5" and new_res["spec_version"] == 5
    assert new_res["levels"][0]["fields"] == {"model": 2}
    assert not human["watermarked"] and human["profile"] == "v5"  # nothing matched: the served profile's result
    # a moderator (level 1 only) gets the same profile named, level 1 only
    (mod,) = _verify(fresh, [old], role="moderator")
    assert mod["profile"] == "v3" and len(mod["levels"]) == 1 and mod["levels"][0]["fields"] == {"model": 37}


def test_profile_use_records_the_choice_and_a_second_use_makes_no_keys(deployment, capsys):
    from verifier.base.settings import Settings
    from verifier.keys.deployment import ProfileChoiceError, choose_profile, recorded_profile
    from verifier.process import open_database

    assert _cli(capsys, "keys", "init", "--profile", "v3")[0] == 0
    assert _cli(capsys, "keys", "init", "--profile", "v4")[0] == 0
    with pytest.raises(ProfileChoiceError, match="hero profile use NAME"):
        choose_profile(None, ["v3", "v4"])
    code, _out, err = _cli(capsys, "keys", "rotate", "--level", "1")  # two profiles, no choice: asked for
    assert code == 2 and "hero profile use NAME" in err
    code, used, err = _cli(capsys, "profile", "use", "v4")
    assert code == 0 and used["created"] == [] and used["before"] is None, err  # keys existed: none made
    assert choose_profile(None, ["v3", "v4"], "v4") == "v4"
    code, rotated, err = _cli(capsys, "keys", "rotate", "--level", "1")
    assert code == 0 and rotated["profile"] == "v4", err
    code, used, err = _cli(capsys, "profile", "use", "v3")
    assert code == 0 and used["before"] == "v4", err
    db = open_database(Settings())
    assert recorded_profile(db) == "v3"
    from sqlalchemy import select

    from verifier.audit.models import AuditEventRow

    with db.session() as s:
        details = [e.detail for e in s.scalars(select(AuditEventRow).where(AuditEventRow.action == "keys.use_profile"))]
    assert details == ["- -> v4", "v4 -> v3"]
    code, _out, err = _cli(capsys, "profile", "use", "no_such_profile")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
