"""`hero jobs`: submit (with an Idempotency-Key), status, and `results`, which follows the result pages to the end
and prints one NDJSON line per text; the client here talks to an in-process app."""

from __future__ import annotations

import json

import pytest

from tests.helpers.service import service_factory
from tests.helpers.workers import JobService, make_texts
from verifier.cli import main
from verifier.client import HeroClient

pytestmark = pytest.mark.slow  # a service, keys and a drained job per test


class _Shared(HeroClient):
    """The test's in-process client, left open when a command is done with it."""

    def close(self) -> None:
        pass


@pytest.fixture
def svc(hero_home, sqlite_url):
    gen = service_factory(hero_home, JobService)
    s = next(gen)(sqlite_url, job_batch_size=4)
    s.init_keys()
    yield s
    gen.close()


def test_submit_status_and_results_follow_every_page(svc, tmp_path, monkeypatch, capsys):
    token = svc.token("admin", "admin-1")
    monkeypatch.setattr("verifier.cli.jobs._client", lambda args: _Shared(client=svc.client, token=token))
    texts = make_texts(svc, 11, steps=40)
    src = tmp_path / "texts.jsonl"
    src.write_text("".join(json.dumps(t) + "\n" for t in texts))
    assert main(["jobs", "submit", str(src), "--idempotency-key", "cli-1"]) == 0
    submitted = json.loads(capsys.readouterr().out)  # JSON, as the other job commands print
    jid = submitted["job_id"]
    assert submitted == {"job_id": jid, "texts": 11, "idempotency_key": "cli-1"}
    assert main(["jobs", "submit", str(src), "--idempotency-key", "cli-1"]) == 0  # a retry: the same job
    assert json.loads(capsys.readouterr().out)["job_id"] == jid
    svc.wait_done(jid, sub="admin-1")
    assert main(["jobs", "status", jid]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "done" and status["progress"] == {"total": 11, "done": 11}
    receipts = tmp_path / "receipts.jsonl"
    assert main(["jobs", "results", jid, "--page-size", "3", "--receipts", str(receipts)]) == 0
    out = capsys.readouterr()
    lines = [json.loads(x) for x in out.out.splitlines()]
    assert [x["index"] for x in lines] == list(range(11)) and "11 results" in out.err
    assert len(receipts.read_text().splitlines()) == 4  # pages of 3, 3, 3, 2: each read audited with a receipt
    whole = svc.job(jid, sub="admin-1")["results"]
    assert [{k: v for k, v in x.items() if k != "index"} for x in lines] == whole


def test_results_of_an_unknown_job_is_one_line(svc, monkeypatch, capsys):
    token = svc.token("admin", "admin-1")
    monkeypatch.setattr("verifier.cli.jobs._client", lambda args: _Shared(client=svc.client, token=token))
    assert main(["jobs", "results", "00000000-0000-0000-0000-000000000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "404" in err[0]
