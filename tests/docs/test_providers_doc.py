"""docs/providers.md's `watermarking_config` example runs as written against `scripts/dev`: register,
bundle, transformers' generate() with min_new_tokens, verify; pasted twice, the registration is no 409."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_readme import dev_server  # noqa: F401 (the fixture: scripts/dev as the README runs it)

ROOT = Path(__file__).resolve().parents[2]


def example() -> str:
    text = (ROOT / "docs" / "providers.md").read_text()
    section = text[text.index("## transformers: `watermarking_config`"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_is_whole():
    code = example()
    for needed in ("/v1/providers", "generation-bundle", "open_bundle(", "watermarking_config=cfg",
                   "min_new_tokens=", "hero.verify("):
        assert needed in code, needed
    compile(code, "providers.md", "exec")  # nothing undefined at parse level; the run below executes it


@pytest.mark.slow
@pytest.mark.model
def test_the_watermarking_config_example_runs_as_written(dev_server):  # noqa: F811
    _, env = dev_server
    r = subprocess.run([sys.executable, "-c", example()], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines() == ["True {'model': 37, 'user': 1234}", "True {'model': 37, 'user': 99}"]
    code = example()
    again = code[: code.index("# 3. Generate")]  # pasted a second time: the kept key pair, no second registration
    r = subprocess.run([sys.executable, "-c", again], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
