"""`hero serve --workers N` tokenizes in each worker's calling thread (verifier.lm.tokenize_in_calling_thread):
no tokenizer thread pool per process, the same ids; and runs the evidence kernel and torch in one thread
(verifier.cli.serve_workers.compute_in_calling_threads). That `hero serve` asks for both: test_serve_workers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from verifier.cli.serve_workers import OMP_NUM_THREADS, compute_in_calling_threads
from verifier.lm import TOKENIZERS_PARALLELISM, tokenize_in_calling_thread

_PROBE = """
import hashlib, json, os
from verifier.cli.bench_figures import bench_texts
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


_KERNEL_THREADS = "from gpu.cpu_kernel import default_threads; print(default_threads())"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the kernel has one thread either way")
def test_one_compute_thread_reaches_the_evidence_kernel():
    """compute_in_calling_threads sets OMP_NUM_THREADS=1; the kernel takes its thread count from torch's."""
    def threads(extra: dict) -> int:
        env = {k: v for k, v in os.environ.items() if k != OMP_NUM_THREADS} | extra
        out = subprocess.run([sys.executable, "-c", _KERNEL_THREADS], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return int(out.stdout.strip().splitlines()[-1])

    assert threads({}) > 1
    assert threads({OMP_NUM_THREADS: "1"}) == 1


def test_explicit_thread_settings_win(monkeypatch):
    monkeypatch.setenv(OMP_NUM_THREADS, "4")
    monkeypatch.setenv(TOKENIZERS_PARALLELISM, "true")
    compute_in_calling_threads()
    assert os.environ[OMP_NUM_THREADS] == "4" and os.environ[TOKENIZERS_PARALLELISM] == "true"
    monkeypatch.delenv(OMP_NUM_THREADS)  # recorded above: restored after the test
    monkeypatch.delenv(TOKENIZERS_PARALLELISM)
    compute_in_calling_threads()
    assert os.environ[OMP_NUM_THREADS] == "1" and os.environ[TOKENIZERS_PARALLELISM] == "false"
