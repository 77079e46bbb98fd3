"""`expect` on POST /v1/verify: the one-value test through the API (engine/expected.py). A moderator asks about
a model (spec v3's per-value public level), an auditor about a user; never above the caller's level, never a
segmented level, and the answer is bound into the result's receipt."""

from __future__ import annotations

import pytest

from tests.helpers.workers import make_texts


def _verify(svc, texts, role, **body):
    return svc.client.post("/v1/verify", headers=svc.auth(role), json={"texts": texts, **body})


@pytest.fixture
def v3(sqlite_url, make_service):
    svc = make_service(sqlite_url, profile="v3")
    svc.init_keys()
    return svc


def test_a_moderator_asks_about_one_model(v3):
    texts = make_texts(v3, 4, steps=60)  # payloads: model = 7 i (first field), user = 7 i + 1
    r = _verify(v3, texts, "moderator", expect={"model": 7})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["expected"][0]["matches"] for x in res] == [False, True, False, False]
    own = res[1]["expected"][0]
    assert own["level"] == 1 and own["fields"] == {"model": 7} and own["p_value"] < 1e-4
    assert own["p_value"] <= res[1]["levels"][0]["p_value"]  # no search over the 256 models to pay for
    assert [lv["level"] for lv in res[1]["levels"]] == [1]  # still the moderator's view only
    plain = _verify(v3, texts, "moderator").json()["results"]
    assert all("expected" not in x for x in plain)  # absent, not null: results (and receipts) as before `expect`


def test_expect_is_bound_into_the_receipt(v3):
    from verifier.audit.transparency import TransparencyError, verify_receipt

    texts = make_texts(v3, 2, steps=60)
    vkey = v3.client.get("/v1/audit/public-key", headers=v3.auth("moderator")).text.strip()
    res = _verify(v3, texts, "moderator", expect={"model": 0}).json()["results"]
    for text, x in zip(texts, res, strict=True):
        verify_receipt(x["receipt"], vkey, text=text, result=x)
        flipped = [{**x["expected"][0], "matches": not x["expected"][0]["matches"]}]
        with pytest.raises(TransparencyError):  # the answer to the question is what was logged
            verify_receipt(x["receipt"], vkey, text=text, result={**x, "expected": flipped})


def test_expect_refuses_levels_above_the_role_and_unknown_or_partial_values(v3, lite):
    texts = make_texts(v3, 1, steps=40)
    r = _verify(v3, texts, "moderator", expect={"user": 1})
    assert r.status_code == 403 and "above the level granted" in r.json()["detail"]
    r = _verify(v3, texts, "auditor", expect={"user": 1, "model": 0})
    assert r.status_code == 200 and [e["level"] for e in r.json()["results"][0]["expected"]] == [1, 2]
    for bad, word in [({"nope": 1}, "unknown field"), ({"model": 1 << 9}, "does not fit"),
                      ({"model": "7"}, "integer"), ({"model": True}, "integer")]:
        r = _verify(v3, texts, "moderator", expect=bad)
        assert r.status_code == 422 and word in str(r.json()["detail"]), (bad, r.text)
    lite.init_keys()  # the default profile (spec v2): its public level is segmented
    r = _verify(lite, make_texts(lite, 1, steps=40), "moderator", expect={"model": 3})
    assert r.status_code == 422 and "segmented" in r.json()["detail"]


def test_an_auditor_asks_about_one_user_on_the_default_profile(lite):
    lite.init_keys()
    texts = make_texts(lite, 3, steps=80)
    fields = [f.name for lv in lite.ctx.profile.levels for f in lv.fields]
    assert fields[-1] == "user"
    user = (7 * 2 + len(fields) - 1) % 4096  # text 2's user (make_texts' payloads)
    res = _verify(lite, texts, "auditor", expect={"user": user}).json()["results"]
    assert [x["expected"][0]["matches"] for x in res] == [False, False, True]


def test_hero_decode_expect_answers_as_the_api_does(lite, monkeypatch, capsys):
    import json

    from tests.verify.test_one_runner import _cli_env
    from verifier.cli import main

    lite.init_keys()
    (text,) = make_texts(lite, 1, steps=80)
    user = (len([f for lv in lite.ctx.profile.levels for f in lv.fields]) - 1) % 4096  # text 0's user
    r = lite.client.post("/v1/verify", headers=lite.auth("admin"), json={"texts": [text], "expect": {"user": user}})
    api = {k: v for k, v in r.json()["results"][0].items() if k != "receipt"}
    assert api["expected"][0]["matches"] is True
    _cli_env(monkeypatch, lite)
    assert main(["decode", "--local", "--levels", "1,2", "--text", text, "--expect", f"user={user}"]) == 0
    assert json.loads(capsys.readouterr().out) == api
    assert main(["decode", "--local", "--levels", "1", "--text", text, "--expect", f"user={user}"]) != 0
    assert "above the level" in capsys.readouterr().err


def test_the_client_passes_expect_and_reads_the_answer(v3):
    from verifier.client import HeroClient

    texts = make_texts(v3, 2, steps=60)
    client = HeroClient(client=v3.client, token=v3.token("moderator"))
    res = client.verify(texts, expect={"model": 7})
    assert [r.expected[0]["matches"] for r in res] == [False, True]
