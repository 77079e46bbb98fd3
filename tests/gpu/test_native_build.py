"""The C extension that runs is built from the source beside it: a build of another source (an edited kernel
with an old `pip install -e .`) is refused as stale and the kernel is rebuilt into the per-user cache."""

from __future__ import annotations

import hashlib
import sys
import types

import pytest

import gpu
from gpu import cpu_kernel


def _fresh_loader(monkeypatch: pytest.MonkeyPatch, installed: types.ModuleType) -> list[str]:
    builds: list[str] = []
    monkeypatch.setattr(cpu_kernel, "_MODULE", None)
    monkeypatch.setattr(cpu_kernel, "_TRIED", False)
    monkeypatch.setattr(cpu_kernel, "_ERROR", None)
    monkeypatch.setitem(sys.modules, "gpu._hero_kernels", installed)
    monkeypatch.setattr(gpu, "_hero_kernels", installed, raising=False)  # `from gpu import _hero_kernels` reads it
    monkeypatch.setattr(cpu_kernel, "_build_in_cache", lambda: builds.append("built") or types.SimpleNamespace(
        ABI=cpu_kernel.ABI, SOURCE_SHA=cpu_kernel._source_sha()))
    return builds


def test_a_build_of_this_source_is_used(monkeypatch):
    installed = types.ModuleType("gpu._hero_kernels")
    installed.ABI = cpu_kernel.ABI
    installed.SOURCE_SHA = hashlib.sha256(cpu_kernel.SOURCE.read_bytes()).hexdigest()
    builds = _fresh_loader(monkeypatch, installed)
    assert cpu_kernel.load() is installed and builds == []


@pytest.mark.parametrize("sha", ["0" * 64, None])
def test_a_build_of_another_source_is_stale(monkeypatch, sha):
    installed = types.ModuleType("gpu._hero_kernels")
    installed.ABI = cpu_kernel.ABI  # same ABI number: only the source hash tells the builds apart
    if sha is not None:
        installed.SOURCE_SHA = sha
    builds = _fresh_loader(monkeypatch, installed)
    module = cpu_kernel.load()
    assert builds == ["built"] and module is not installed and cpu_kernel.error() is None


def test_the_running_build_matches_its_source():
    """The extension this checkout runs was built from its current source (setup.py and the cache build both
    record the hash)."""
    module = cpu_kernel.load()
    if module is None:
        pytest.skip(f"C kernel not built: {cpu_kernel.error()}")
    assert module.SOURCE_SHA == hashlib.sha256(cpu_kernel.SOURCE.read_bytes()).hexdigest()
