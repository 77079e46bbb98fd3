"""A fast local start: `hero keys list` imports no torch, a local `hero decode` no transformers (its
tokenizer from tokenizer.json through `tokenizers` alone, the same ids); timings: benchmarks/cli_startup.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from verifier.cli import main
rc = main(sys.argv[1:])
print("LOADED=" + ",".join(m for m in ("torch", "transformers") if m in sys.modules), rc)
"""
TEXTS = ["Hello world, the café — naïve 北京 🙂\n\n  spaces", "The history of the printing press began in 1440.",
         " leading space", "tab\tand\r\nCRLF", "x" * 300, "don't stop: it's 3.14 — or ≈ 22/7?"]


def _converted() -> bool:
    from verifier.lm import cache_dir

    return (cache_dir("smollm2") / "tokenizer.json").is_file() and (cache_dir("smollm2") / "config.json").is_file()


def _probe(*argv: str) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, env=dict(os.environ), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def test_keys_list_imports_no_torch(hero_home):
    assert _probe("keys", "list") == "LOADED= 0"


def test_local_decode_imports_no_transformers(hero_home):
    if not _converted():
        pytest.skip("no converted smollm2 (tokenizer.json) in HERO_MODEL_CACHE: the decode falls back to transformers")
    assert _probe("keys", "init").startswith("LOADED=")
    assert _probe("decode", "--local", "--text", TEXTS[1]) == "LOADED=torch 0"


def test_the_tokenizers_only_tokenizer_gives_the_same_ids():
    if not _converted():
        pytest.skip("no converted smollm2 (tokenizer.json) in HERO_MODEL_CACHE")
    from verifier.lm import decode_tokenizer, encode_ids, load_tokenizer

    fast, hf = decode_tokenizer("smollm2"), load_tokenizer("smollm2")
    assert type(fast).__name__ == "FastTokenizer"
    assert encode_ids(fast, TEXTS) == hf(TEXTS, add_special_tokens=False)["input_ids"]
    one = fast(TEXTS[0], return_offsets_mapping=True)
    ref = hf(TEXTS[0], add_special_tokens=False, return_offsets_mapping=True)
    assert one["input_ids"] == ref["input_ids"] and [tuple(o) for o in one["offset_mapping"]] == [
        tuple(o) for o in ref["offset_mapping"]]
