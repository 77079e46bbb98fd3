"""Admission of a verify request (verifier/api/context.py `ServiceContext.admit`, verifier/verify/admission.py): the
level is granted once per request, by one `Policy.grant`, and that grant is the level the decode runs at; `expect`
is held against the grant once, before any decode, and the runner answers nothing above its grant."""

from __future__ import annotations

import pytest

from tests.helpers.workers import make_texts
from verifier.api.fastpath import VerifyFastPath
from verifier.auth.policy import Policy
from verifier.verify.runner import DecodeJob


def _grants(monkeypatch) -> list[tuple[str, int | None]]:
    """Every `Policy.grant` from now on, as (role, requested level)."""
    calls: list[tuple[str, int | None]] = []
    real = Policy.grant

    def counted(self, role, profile, requested=None):
        calls.append((role, requested))
        return real(self, role, profile, requested)

    monkeypatch.setattr(Policy, "grant", counted)
    return calls


def _decodes(monkeypatch, svc) -> list[DecodeJob]:
    """Every job the service's runner decodes from now on."""
    jobs: list[DecodeJob] = []
    real = svc.ctx.runner.decode

    def spy(job):
        jobs.append(job)
        return real(job)

    monkeypatch.setattr(svc.ctx.runner, "decode", spy)
    return jobs


def _fast(svc) -> VerifyFastPath:
    layer = svc.app.middleware_stack
    while not isinstance(layer, VerifyFastPath):
        layer = layer.app
    return layer


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "route"])
def test_one_grant_per_verify_request(make_service, sqlite_url, monkeypatch, fast_path):
    svc = make_service(sqlite_url, verify_fast_path=fast_path)
    svc.init_keys()
    texts = make_texts(svc, 2)
    grants, jobs = _grants(monkeypatch), _decodes(monkeypatch, svc)
    taken = _fast(svc).taken if fast_path else 0
    r = svc.client.post("/v1/verify", headers=svc.auth("moderator"), json={"texts": texts})
    assert r.status_code == 200, r.text
    assert grants == [("moderator", None)]
    assert [j.level for j in jobs] == [1]  # the grant is what the decode runs at
    assert all([lv["level"] for lv in x["levels"]] == [1] for x in r.json()["results"])
    if fast_path:
        assert _fast(svc).taken == taken + 1


def test_one_grant_with_a_requested_level_and_expect(lite, monkeypatch):
    lite.init_keys()
    texts = make_texts(lite, 2)
    user = lite.ctx.profile.levels[1].fields[0].name
    grants, jobs = _grants(monkeypatch), _decodes(monkeypatch, lite)
    r = lite.client.post("/v1/verify", headers=lite.auth("auditor"),
                         json={"texts": texts, "max_level": 2, "expect": {user: 5}})
    assert r.status_code == 200, r.text
    assert grants == [("auditor", 2)]
    assert [(j.level, j.expect) for j in jobs] == [(2, ((2, 5),))]


def test_one_grant_per_job_submission(lite, monkeypatch):
    lite.init_keys()
    monkeypatch.setattr(lite.ctx.jobs, "submit", lambda *a, **kw: None)  # the drain's own grant is not the request's
    grants = _grants(monkeypatch)
    r = lite.client.post("/v1/jobs", headers=lite.auth("moderator"), json={"texts": ["a text to decode later"]})
    assert r.status_code == 202, r.text
    assert grants == [("moderator", None)]


def test_expect_above_the_grant_is_refused_before_any_decode(lite, monkeypatch):
    lite.init_keys()
    texts = make_texts(lite, 1)
    user = lite.ctx.profile.levels[1].fields[0].name
    grants, jobs = _grants(monkeypatch), _decodes(monkeypatch, lite)
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={"texts": texts, "expect": {user: 5}})
    assert r.status_code == 403 and "above the level granted to you (1)" in r.json()["detail"]
    assert grants == [("moderator", None)] and jobs == []


def test_the_runner_answers_nothing_above_its_grant(lite):
    """The runner holds keys of levels 1..grant only: a job asking about a deeper level gets no test of it (the
    request's own check refuses such an `expect` before a job is made)."""
    lite.init_keys()
    texts = make_texts(lite, 2)
    ctx = lite.ctx
    results = ctx.runner.decode(DecodeJob(ctx.profile, tuple(texts), 1, ctx.settings.alpha, expect=((2, 5),)))
    assert [r["expected"] for r in results] == [[], []]
    assert all([lv["level"] for lv in r["levels"]] == [1] for r in results)
