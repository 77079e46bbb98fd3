"""`hero bench serve`: one JSON line with the contract keys, from a server it starts and stops itself."""

from __future__ import annotations

import json
import shutil

import pytest

from verifier.cli import main

KEYS = {"texts_per_s", "tokens_per_s", "p50_ms", "p99_ms", "errors", "tokenizer_tokens_per_s"}


def test_flags_are_checked(capsys):
    assert main(["bench", "serve", "--seconds", "0"]) == 2
    assert "--seconds" in capsys.readouterr().err
    assert main(["bench", "serve", "--concurrency", "0"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("generator", ["python", "wrk"])
def test_bench_serve_prints_one_json_line(capsys, generator):
    if generator == "wrk" and shutil.which("wrk") is None:
        pytest.skip("wrk not installed (scripts/install_wrk)")
    rc = main(["bench", "serve", "--seconds", "1", "--concurrency", "2", "--texts-per-request", "2",
               "--generator", generator])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    d = json.loads(out[0])
    assert KEYS <= set(d)
    assert d["errors"] == 0 and d["texts_per_s"] > 0 and d["p99_ms"] >= d["p50_ms"] > 0
    assert d["generator"] == generator and d["texts_per_request"] == 2 and d["role"] == "moderator"
    assert d["tokenizer_tokens_per_s"] > d["tokens_per_s"] > 0
    before, after = d["tokenizer_tokens_per_s_before_after"]  # the bound: the mean of two idle timings
    assert before > 0 and after > 0 and d["tokenizer_tokens_per_s"] == pytest.approx((before + after) / 2, abs=0.2)
    assert d["ratio_to_tokenizer"] == pytest.approx(d["tokens_per_s"] / d["tokenizer_tokens_per_s"], abs=2e-3)


def test_server_source_runs_that_checkouts_code(tmp_path, monkeypatch):
    """`python -m` puts the working directory ahead of PYTHONPATH, so the server and its set-up commands must
    run inside --server-source, or a bench started in one checkout silently serves that checkout's code."""
    import subprocess

    from verifier.cli import bench_serve

    seen = []

    def fake_run(cmd, **kw):
        seen.append((kw.get("cwd"), kw["env"].get("PYTHONPATH")))
        raise RuntimeError("stop here")

    monkeypatch.setattr(subprocess, "run", fake_run)
    src = tmp_path / "other-checkout"
    src.mkdir()
    args = bench_serve.argparse.Namespace(server_source=str(src), profile=None, server_env=[], role="moderator")
    with pytest.raises(RuntimeError, match="stop here"):
        bench_serve._run(args, tmp_path, None, None)
    assert seen == [(str(src.resolve()), str(src.resolve()))]
