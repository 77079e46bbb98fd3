"""One decode path: POST /v1/verify, decode jobs (in process and on the Celery worker's process builder) and
`hero decode --local` all decode through `Runner.run`, at a level granted once, with the same verdicts."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import delete

from tests.helpers.workers import make_texts
from verifier.auth.policy import Policy, Role
from verifier.jobs import service as jobs
from verifier.jobs.drain import drain
from verifier.keys.models import KeyVersionRow
from verifier.process import ProcessLocal
from verifier.verify.runner import Runner


def _cli_env(monkeypatch, svc) -> None:
    """`hero` in this test process, on the service's database and KEK."""
    monkeypatch.setenv("HERO_HOME", str(svc.settings.home))
    monkeypatch.setenv("HERO_DATABASE_URL", svc.settings.db_url)
    monkeypatch.delenv("HERO_URL", raising=False)


def _wait_job(svc, job_id: str, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        doc = svc.client.get(f"/v1/jobs/{job_id}", headers=svc.auth("auditor")).json()
        if doc["status"] in ("done", "failed"):
            return doc
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not finished")


def test_verify_jobs_and_hero_decode_all_decode_through_the_one_runner(lite, monkeypatch, capsys):
    from verifier.cli import main

    lite.init_keys()
    calls: list[tuple[str, int, str]] = []
    real = Runner.run

    def spy(self, job):
        calls.append((path, job.level, job.device))
        return real(self, job)

    monkeypatch.setattr(Runner, "run", spy)
    text = "an ordinary sentence about the weather today"

    path = "verify"
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={"texts": [text]})
    assert r.status_code == 200

    path = "job (in process)"
    r = lite.client.post("/v1/jobs", headers=lite.auth("auditor"), json={"texts": [text]})
    assert r.status_code == 202
    assert _wait_job(lite, r.json()["job_id"])["status"] == "done"

    path = "job (Celery worker's process)"  # what workers.tasks.drain_job runs, without the broker
    jid = jobs.create_job(lite.ctx.db, lite.ctx.store.kek, owner_sub="s", role="moderator", jti="j",
                          profile=lite.ctx.profile.name, max_level=1, alpha=lite.settings.alpha, texts=[text])
    worker = ProcessLocal(lite.settings)()
    try:
        assert isinstance(worker.runner, Runner)
        assert drain(worker.drain_context("worker", lite.settings.worker_device), jid).written == 1
    finally:
        worker.close()

    path = "hero decode"
    _cli_env(monkeypatch, lite)
    assert main(["decode", "--local", "--levels", "1,2", "--text", text]) == 0
    capsys.readouterr()

    assert calls == [("verify", 1, "cpu"), ("job (in process)", 2, "cpu"),
                     ("job (Celery worker's process)", 1, "cpu"), ("hero decode", 2, "cpu")]


def test_hero_decode_reports_missing_levels_exactly_as_the_api_does(lite, monkeypatch, capsys):
    from verifier.cli import main

    lite.init_keys()
    (text,) = make_texts(lite, 1, steps=96)
    with lite.ctx.db.session() as s:  # level 2 has no usable key at all: `undecodable`, with the reason
        s.execute(delete(KeyVersionRow).where(KeyVersionRow.level == 2))
    r = lite.client.post("/v1/verify", headers=lite.auth("admin"), json={"texts": [text]})
    assert r.status_code == 200
    api = {k: v for k, v in r.json()["results"][0].items() if k != "receipt"}
    assert api["levels"][0]["status"] in ("decoded", "detected")  # 96 tokens: the value may be withheld (15.4)
    assert api["levels"][1]["status"] == "undecodable" and api["levels"][1]["reason"] == "no usable key for level 2"

    _cli_env(monkeypatch, lite)
    assert main(["decode", "--local", "--levels", "1,2", "--text", text]) == 0
    assert json.loads(capsys.readouterr().out) == api


def test_a_job_is_granted_again_under_the_policy_in_force_and_fails_closed(lite, monkeypatch):
    """A role whose level was lowered after the job was accepted gets no level-2 material: the job fails."""
    lite.init_keys()
    jid = jobs.create_job(lite.ctx.db, lite.ctx.store.kek, owner_sub="s", role="auditor", jti="j",
                          profile=lite.ctx.profile.name, max_level=2, alpha=lite.settings.alpha, texts=["a text"])
    opened = []
    real = type(lite.ctx.store)._open
    monkeypatch.setattr(type(lite.ctx.store), "_open", lambda self, row: opened.append(row.level) or real(self, row))
    worker = ProcessLocal(lite.settings)()
    try:
        dc = worker.drain_context("worker")
        dc.policy = Policy({"auditor": Role("auditor", 1, frozenset({"verify"}))})
        assert drain(dc, jid).written == 0
    finally:
        worker.close()
    doc = lite.client.get(f"/v1/jobs/{jid}", headers=lite.auth("admin", "s")).json()
    assert doc["status"] == "failed" and "level 2 not allowed for role 'auditor' (maximum 1)" in doc["error"]
    assert 2 not in opened


@pytest.mark.parametrize("requested", [None, 1])
def test_the_level_is_decided_once_and_carried(lite, monkeypatch, requested):
    """The runner receives the granted level as is: no clamp after the grant."""
    lite.init_keys()
    levels = []
    real = Runner.run
    monkeypatch.setattr(Runner, "run", lambda self, job: levels.append(job.level) or real(self, job))
    body = {"texts": ["some text to check"], "max_level": requested}
    assert lite.client.post("/v1/verify", headers=lite.auth("auditor"), json=body).status_code == 200
    assert levels == [2 if requested is None else 1]
    r = lite.client.post("/v1/verify", headers=lite.auth("moderator"), json={**body, "max_level": 2})
    assert r.status_code == 403 and levels == [2 if requested is None else 1]  # refused before any decode
