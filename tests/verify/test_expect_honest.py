"""`expect` cannot be p-hacked into a receipt (verify/expect.py): every asked value is recorded in the audit log,
counted per (subject, text) and corrected for, with a cap; a refused `expect` is audited and charges no quota."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select

from tests.helpers.workers import make_texts
from verifier.audit.models import AuditEventRow
from verifier.audit.service import text_digest

HUMAN = ("The committee said the proposals, first published in March, would be reviewed again after the summer, "
         "when ministers expect to receive the findings of an independent inquiry into costs.")


def _ask(svc, texts, expect, role="auditor", sub="alice"):
    return svc.client.post("/v1/verify", headers=svc.auth(role, sub), json={"texts": texts, "expect": expect})


def _events(svc, digest: str) -> list[AuditEventRow]:
    with svc.ctx.db.snapshot() as s:
        rows = list(s.scalars(select(AuditEventRow).where(AuditEventRow.text_sha256 == digest)
                              .order_by(AuditEventRow.idx)))
        s.expunge_all()
        return rows


@pytest.mark.slow
def test_an_auditor_asking_every_user_about_a_human_text_gets_no_match_and_the_log_has_every_value(lite):
    """4,096 users asked about one human text: no 200 says `matches: true` (each answer is corrected for the values
    asked before it, and past HERO_EXPECT_MAX_VALUES the service refuses), and the audit log names every value."""
    lite.init_keys()
    cap = lite.settings.expect_max_values
    auth = lite.auth("auditor", "mallory")
    answered, refused, limited, asked = [], 0, 0, set()
    for user in range(4096):
        r = lite.client.post("/v1/verify", headers=auth, json={"texts": [HUMAN], "expect": {"user": user}})
        if r.status_code == 200:
            e = r.json()["results"][0]["expected"][0]
            answered.append(e)
            asked.add(user)
            assert not e["matches"], (user, e)
        elif r.status_code == 429:  # refusals are charged like any request: over quota nothing is written
            limited += 1
        else:
            assert r.status_code == 403 and "HERO_EXPECT_MAX_VALUES" in r.json()["detail"], r.text
            refused += 1
            asked.add(user)
    assert len(answered) == cap and refused + limited == 4096 - cap and refused > 0
    assert [e["values_asked"] for e in answered] == list(range(1, cap + 1))
    assert all(e["correction"] == "bonferroni-over-asked" for e in answered)
    seen = set()
    for ev in _events(lite, text_digest(HUMAN)):
        assert ev.subject == "mallory"
        if ev.action == "verify":
            (part,) = [p for p in ev.detail.split() if p.startswith("expect=l2:")]
            seen.add(int(part.split(":")[1]))
            assert "matches=false" in part and "p=" in part
        else:
            assert ev.action == "verify.refused" and ev.outcome == "http-403"
            seen.add(int(ev.detail.split("'user':")[1].split("}")[0]))
    assert seen == asked  # every value answered or refused is on the record; none over quota was answered


def test_each_answer_is_corrected_for_the_values_asked_before(make_service, sqlite_url):
    svc = make_service(sqlite_url, profile="v3")
    svc.init_keys()
    (text,) = make_texts(svc, 1, steps=40)
    fresh = [_ask(svc, [text], {"model": m}, "moderator", f"fresh{m}").json()["results"][0]["expected"][0]
             for m in range(4)]
    assert all(e["values_asked"] == 1 for e in fresh)
    for m in range(4):  # one subject, four values: the k-th answer pays for k questions
        e = _ask(svc, [text], {"model": m}, "moderator", "bob").json()["results"][0]["expected"][0]
        assert e["values_asked"] == m + 1
        assert e["log10_p_value"] == pytest.approx(min(0.0, fresh[m]["log10_p_value"] + math.log10(m + 1)))
    again = _ask(svc, [text], {"model": 0}, "moderator", "bob").json()["results"][0]["expected"][0]
    assert again["values_asked"] == 4  # distinct values: asking one again adds none
    (ev,) = [e for e in _events(svc, text_digest(text)) if e.subject == "bob"][-1:]
    assert "expect=l1:0:" in ev.detail and "asked=4" in ev.detail and "matches=" in ev.detail
