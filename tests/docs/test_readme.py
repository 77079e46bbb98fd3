"""The README's code blocks run as written: `scripts/dev` itself serves (on a free port, under a fresh
HERO_HOME), its printed `export` lines give the tokens, every other bash block runs in bash from the repository root,
and the Python blocks run in order in one interpreter with those exports, as a reader pastes them. A block is left
out only when an HTML comment `<!-- readme-test: skip (why) -->` stands right above it (today: `scripts/test`, the
suite itself). `text` blocks (the CLI synopsis) are not commands."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.browser import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"(<!-- readme-test: skip[^>]*-->\n)?```(\w+)\n(.*?)```", re.S)
DEV_BLOCK = "scripts/dev"


def blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, code, skipped) of every fenced block, in order."""
    return [(m.group(2), m.group(3), m.group(1) is not None) for m in FENCE.finditer(text)]


def test_the_readme_blocks_are_found_and_few_are_skipped():
    found = blocks(README.read_text())
    langs = [lang for lang, _, _ in found]
    assert langs.count("bash") >= 3 and langs.count("python") == 2, langs
    skipped = [code.strip() for _, code, skip in found if skip]
    assert skipped == ["scripts/test"], skipped  # the minimal set: the suite cannot run itself
    assert any(code.strip().startswith(DEV_BLOCK) for lang, code, _ in found if lang == "bash")


@pytest.fixture
def dev_server(tmp_path):
    """The README's first block, `scripts/dev`, as written; yields (base URL, its printed exports)."""
    found = blocks(README.read_text())
    (dev,) = [code for lang, code, skip in found if lang == "bash" and code.strip().startswith(DEV_BLOCK)]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    env.update(HERO_HOME=str(tmp_path / "hero"), HERO_PORT=str(port), HERO_MODEL_CACHE=os.environ.get(
        "HERO_MODEL_CACHE", str(Path.home() / ".hero" / "models")))
    log = (tmp_path / "dev.log").open("w+")
    proc = subprocess.Popen(["bash", "-c", dev], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # polled: a bound for a loaded machine (scripts/dev may install first)
        while True:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, Path(log.name).read_text()[-3000:]
            time.sleep(0.5)
        printed = Path(log.name).read_text()
        exports = dict(re.findall(r"^\s*export (\w+_TOKEN|HERO_URL)=(\S+)", printed, re.M))
        assert set(exports) == {"MOD_TOKEN", "AUD_TOKEN", "ADM_TOKEN", "PRV_TOKEN", "HERO_URL"}, printed
        assert exports["HERO_URL"] == base  # the service's address as printed: the README's blocks use it
        yield base, {**env, **exports}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.slow
@pytest.mark.model
def test_every_readme_block_runs_as_written_after_scripts_dev(dev_server):
    base, env = dev_server
    found = blocks(README.read_text())
    for lang, code, skip in found:
        if lang != "bash" or skip or code.strip().startswith(DEV_BLOCK):
            continue
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, (code, r.stderr[-2000:])

    python = "\n".join(code for lang, code, skip in found if lang == "python" and not skip)
    r = subprocess.run([sys.executable, "-c", python], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=3600)  # a bound for a loaded machine: SmolLM2 generates 200 tokens on the CPU
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[-2:] == ["True", "False"], lines[-5:]  # the job: the provider's text marked, the plain one not
    verdict = lines[-3].split()
    assert verdict[0] == "True" and verdict[2] == "l1-v1", lines[-3]  # hero.verify: watermarked, its key version
    providers = httpx.get(base + "/v1/providers", headers={"Authorization": "Bearer " + env["ADM_TOKEN"]}).json()
    assert [p["provider_id"] for p in providers["providers"]] == ["dev-provider"], providers
    # pasted a second time, the provider block's registration is no 409: the kept key pair, registered once
    first = next(code for lang, code, skip in found if lang == "python" and not skip)
    again = first[: first.index("\nprv = ")]
    r = subprocess.run([sys.executable, "-c", again], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
