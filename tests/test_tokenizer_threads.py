"""`hero serve --workers N` tokenizes in each worker's calling thread (verifier.lm.tokenize_in_calling_thread):
no tokenizer thread pool per process, the same ids."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from verifier.lm import TOKENIZERS_PARALLELISM, tokenize_in_calling_thread

_PROBE = """
import hashlib, json, os
from verifier.cli.bench_serve import bench_texts
from verifier.lm import encode_ids, load_tokenizer
tok = load_tokenizer("smollm2")
texts = bench_texts(tok, 64)
ids = [encode_ids(tok, texts[i:i + 32]) for i in (0, 32)]
print(json.dumps({"threads": len(os.listdir("/proc/self/task")),
                  "ids": hashlib.sha256(json.dumps(ids).encode()).hexdigest()}))
"""


def _probe(parallelism: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != TOKENIZERS_PARALLELISM}
    if parallelism is not None:
        env[TOKENIZERS_PARALLELISM] = parallelism
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_serial_tokenization_starts_no_pool_and_gives_the_same_ids():
    pooled, serial = _probe(None), _probe("false")
    assert serial["ids"] == pooled["ids"]
    assert serial["threads"] < pooled["threads"]  # the Rayon pool (>= 1 thread) exists only in the default mode


def test_an_explicit_setting_wins(monkeypatch):
    monkeypatch.setenv(TOKENIZERS_PARALLELISM, "true")
    tokenize_in_calling_thread()
    assert os.environ[TOKENIZERS_PARALLELISM] == "true"
    monkeypatch.delenv(TOKENIZERS_PARALLELISM)  # recorded above: restored after the test
    tokenize_in_calling_thread()
    assert os.environ[TOKENIZERS_PARALLELISM] == "false"


@pytest.mark.parametrize("workers, serial", [(2, True), (1, False)])
def test_serve_tokenizes_serially_only_with_several_workers(tmp_path, monkeypatch, workers, serial):
    import uvicorn

    from verifier import app, logs
    from verifier.cli import service
    from verifier.settings import Settings

    monkeypatch.setenv(TOKENIZERS_PARALLELISM, "unset-below")
    monkeypatch.delenv(TOKENIZERS_PARALLELISM)  # restored (absent) after the test, whatever cmd_serve sets
    monkeypatch.setattr(uvicorn, "run", lambda target, **kw: None)
    monkeypatch.setattr(logs, "configure_logging", lambda level: None)
    # one worker builds its app here: a stand-in, so this process neither loads the tokenizer nor freezes its heap
    ctx = SimpleNamespace(profile=SimpleNamespace(tokenizer="smollm2"), tokenizers=lambda name: None)
    monkeypatch.setattr(app, "create_app", lambda settings: SimpleNamespace(state=SimpleNamespace(ctx=ctx)))
    monkeypatch.setattr(app, "freeze_startup_heap", lambda: None)
    (tmp_path / "roles.yaml").write_text("roles:\n  moderator: {max_level: 1, actions: [verify]}\n")
    settings = Settings(home=tmp_path / "home", roles_file=tmp_path / "roles.yaml",
                        database_url=f"sqlite:///{tmp_path / 'x.db'}", dev_mode=True)
    service.cmd_serve(argparse.Namespace(workers=workers, host=None, port=None, hero_settings=settings))
    assert (os.environ.get(TOKENIZERS_PARALLELISM) == "false") is serial
