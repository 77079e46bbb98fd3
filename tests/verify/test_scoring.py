"""`scoring` ("model-free" | "model-aware") through /v1/verify, /v1/jobs and `hero decode` (HERO_MODEL_AWARE=1,
`--model-aware`). The LM is a small deterministic stand-in (the real one is exercised by the evaluation), so
these tests check the contract: which scoring ran, the LM re-run on the worker's path, calibrated nulls."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.workers import make_texts

HUMAN = ("The committee said the proposals, first published in March, would be reviewed again after the summer, "
         "when ministers expect to receive the findings of an independent inquiry into costs.")


class FakeLM(torch.nn.Module):
    """Next-token logits from the last token id only (a function of the text, as a real LM's are)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(3.0))
        self.vocab = vocab
        self.calls = 0

    def forward(self, input_ids, attention_mask=None):
        self.calls += 1
        v = torch.arange(self.vocab, dtype=torch.float32)
        logits = torch.sin(input_ids.float().unsqueeze(-1) * 0.37 + v * 0.011) * self.scale
        return SimpleNamespace(logits=logits)


@pytest.fixture
def fake_lm(monkeypatch):
    models: dict = {}

    def load_model(name="smollm2", device="cpu"):
        from verifier.lm import VOCAB_SIZES

        models.setdefault(name, FakeLM(VOCAB_SIZES[name]))
        return models[name], None

    monkeypatch.setattr("verifier.lm.load_model", load_model)
    return models


def _verify(svc, texts, role="auditor"):
    r = svc.client.post("/v1/verify", headers=svc.auth(role), json={"texts": texts})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _job(svc, texts, role="auditor"):
    r = svc.client.post("/v1/jobs", headers=svc.auth(role), json={"texts": texts})
    assert r.status_code == 202, r.text
    jid = r.json()["job_id"]
    deadline = time.time() + 60
    while True:
        doc = svc.client.get(f"/v1/jobs/{jid}", headers=svc.auth(role)).json()
        if doc["status"] == "done":
            return doc["results"]
        assert doc["status"] != "failed" and time.time() < deadline, doc
        time.sleep(0.2)


def test_model_free_is_the_default_and_says_so(lite):
    lite.init_keys()
    texts = make_texts(lite, 2, steps=60)
    for res in (_verify(lite, [*texts, HUMAN]), _job(lite, [*texts, HUMAN])):
        assert [r["scoring"] for r in res] == ["model-free"] * 3
        assert res[0]["watermarked"] and not res[2]["watermarked"]


def test_model_aware_service_scores_with_the_lm_in_verify_and_jobs(make_service, sqlite_url, fake_lm):
    svc = make_service(sqlite_url, model_aware=True)
    svc.init_keys()
    texts = make_texts(svc, 2, steps=60)
    for res in (_verify(svc, [*texts, HUMAN]), _verify(svc, [*texts, HUMAN], role="moderator"),
                _job(svc, [*texts, HUMAN])):
        assert [r["scoring"] for r in res] == ["model-aware"] * 3
        assert all(r["watermarked"] for r in res[:2]) and not res[2]["watermarked"]
        assert all(lv["status"] == "absent" for lv in res[2]["levels"])
    assert fake_lm["smollm2"].calls >= 3  # the LM re-ran for each decode call


def test_model_aware_setting_reads_the_environment(monkeypatch, tmp_path):
    from verifier.base.settings import Settings
    from verifier.engine.weighted_decode import DEFAULT_STATISTIC

    assert Settings(home=tmp_path).model_aware_statistic == DEFAULT_STATISTIC == "union"
    monkeypatch.setenv("HERO_MODEL_AWARE_STATISTIC", "likelihood-ratio")
    assert Settings(home=tmp_path).model_aware_statistic == "likelihood-ratio"
    monkeypatch.setenv("HERO_MODEL_AWARE_STATISTIC", "union")
    assert Settings(home=tmp_path).model_aware_statistic == "union"
    monkeypatch.setenv("HERO_MODEL_AWARE_STATISTIC", "best")
    with pytest.raises(ValueError):
        Settings(home=tmp_path)
    monkeypatch.delenv("HERO_MODEL_AWARE_STATISTIC")
    monkeypatch.setenv("HERO_MODEL_AWARE", "1")
    assert Settings(home=tmp_path).model_aware is True
    monkeypatch.delenv("HERO_MODEL_AWARE")
    assert Settings(home=tmp_path).model_aware is False


def test_edit_floors_setting_reaches_the_scorer(monkeypatch, tmp_path):
    """HERO_MODEL_AWARE_EDIT_FLOORS (a JSON list; [] = verbatim readings only) is the scorer's weighting."""
    from verifier.base.settings import Settings
    from verifier.engine.weighted_decode import DEFAULT_EDIT_FLOORS
    from verifier.verify.scoring import model_aware_scorer

    assert Settings(home=tmp_path).model_aware_edit_floors == DEFAULT_EDIT_FLOORS == (1e-4, 1e-5)
    monkeypatch.setenv("HERO_MODEL_AWARE_EDIT_FLOORS", "[1e-3]")
    floors = Settings(home=tmp_path).model_aware_edit_floors
    assert model_aware_scorer(True, "cpu", None, "union", floors).weighting.edit_floors == (1e-3,)
    monkeypatch.setenv("HERO_MODEL_AWARE_EDIT_FLOORS", "[]")
    assert model_aware_scorer(True, "cpu", None, "union",
                              Settings(home=tmp_path).model_aware_edit_floors).weighting.edit_floors == ()
    for bad in ("[0]", "[1.5]", "0.1"):
        monkeypatch.setenv("HERO_MODEL_AWARE_EDIT_FLOORS", bad)
        with pytest.raises(ValueError):
            Settings(home=tmp_path)


def test_cli_decode_model_aware_flag(capsys, hero_home, fake_lm, monkeypatch):
    from verifier.cli import main

    monkeypatch.delenv("HERO_URL", raising=False)
    assert main(["kek", "init"]) == 0  # outside dev mode the CLI mints no KEK
    assert main(["keys", "init"]) == 0
    capsys.readouterr()
    for argv, scoring in ((["--model-aware"], "model-aware"), ([], "model-free")):
        assert main(["decode", "--levels", "1,2", "--text", HUMAN, *argv]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["scoring"] == scoring and not out["watermarked"]
    code = main(["decode", "--url", "http://127.0.0.1:9", "--text", HUMAN, "--model-aware"])
    err = capsys.readouterr().err
    assert code != 0 and "--model-aware applies to a local decode" in err


@pytest.mark.parametrize("statistic", ["likelihood-ratio", "union"])
def test_the_deployments_sampling_reaches_the_scorer_and_the_verdicts(make_service, sqlite_url, fake_lm,
                                                                       monkeypatch, tmp_path, statistic):
    """HERO_MODEL_AWARE_TOP_K / _TOP_P: model-aware scoring reads the re-run under the providers' warp
    (engine/model_aware.DeploymentSampling); a watermarked text still decodes and human text stays absent."""
    from verifier.base.settings import Settings
    from verifier.verify.scoring import deployment_sampling

    monkeypatch.setenv("HERO_MODEL_AWARE_TOP_K", "50")
    monkeypatch.setenv("HERO_MODEL_AWARE_TOP_P", "0.9")
    sampling = deployment_sampling(Settings(home=tmp_path))
    assert (sampling.top_k, sampling.top_p, sampling.temperature) == (50, 0.9, 1.0) and sampling.warps
    monkeypatch.setenv("HERO_MODEL_AWARE_TOP_P", "1.5")
    with pytest.raises(ValueError):
        Settings(home=tmp_path)
    monkeypatch.delenv("HERO_MODEL_AWARE_TOP_K")
    monkeypatch.delenv("HERO_MODEL_AWARE_TOP_P")
    svc = make_service(sqlite_url, model_aware=True, model_aware_top_k=50, model_aware_top_p=0.9,
                       model_aware_statistic=statistic)
    assert svc.ctx.runner.scorer.sampling == sampling
    assert svc.ctx.runner.scorer.weighting.statistic == statistic
    svc.init_keys()
    texts = make_texts(svc, 2, steps=60)
    res = _verify(svc, [*texts, HUMAN])
    assert [r["scoring"] for r in res] == ["model-aware"] * 3
    assert all(r["watermarked"] for r in res[:2]) and not res[2]["watermarked"]


def test_cli_decode_takes_the_providers_sampling_only_with_model_aware(capsys, hero_home, fake_lm, monkeypatch):
    from verifier.cli import main

    monkeypatch.delenv("HERO_URL", raising=False)
    assert main(["kek", "init"]) == 0  # outside dev mode the CLI mints no KEK
    assert main(["keys", "init"]) == 0
    capsys.readouterr()
    for extra in ([], ["--statistic", "likelihood-ratio"], ["--statistic", "linear"], ["--statistic", "union"]):
        assert main(["decode", "--levels", "1,2", "--text", HUMAN, "--model-aware", "--top-k", "50",
                     "--top-p", "0.9", *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["scoring"] == "model-aware" and not out["watermarked"]
    for argv, message in ((["--top-p", "0.9"], "--top-k/--top-p/--statistic apply to --model-aware scoring"),
                          (["--statistic", "likelihood-ratio"], "apply to --model-aware scoring"),
                          (["--model-aware", "--top-p", "1.5"], "top_p must be in (0, 1]")):
        assert main(["decode", "--text", HUMAN, *argv]) != 0
        assert message in capsys.readouterr().err
