"""`hero serve --workers auto` (the default): one worker per core only where that cannot multiply a quota."""

from __future__ import annotations

import argparse
import os
from types import SimpleNamespace

import pytest

from verifier.base.settings import Settings
from verifier.cli.serve import MAX_AUTO_WORKERS, _workers_arg, resolve_workers
from verifier.cli.serve_workers import OMP_NUM_THREADS
from verifier.keys.bootstrap import init_secrets
from verifier.lm import TOKENIZERS_PARALLELISM

NO_LIMITS = "roles:\n  moderator: {max_level: 1, actions: [verify]}\n"
LIMITS = "roles:\n  moderator: {max_level: 1, actions: [verify], limits: {texts_per_minute: 10}}\n"


def _settings(tmp_path, roles: str, **kw) -> Settings:
    path = tmp_path / "roles.yaml"
    path.write_text(roles)
    base = {"home": tmp_path / "home", "roles_file": path, "database_url": f"sqlite:///{tmp_path / 'x.db'}"}
    return Settings(**{**base, **kw})


def _with_secrets(settings: Settings) -> Settings:
    """What `hero kek init` makes once per deployment: `hero serve` outside dev mode refuses to start without it."""
    init_secrets(settings)
    return settings


def test_auto_is_one_per_core_without_quotas(tmp_path):
    assert resolve_workers("auto", _settings(tmp_path, NO_LIMITS), cores=2) == (2, None)
    assert resolve_workers("auto", _settings(tmp_path, NO_LIMITS), cores=64) == (MAX_AUTO_WORKERS, None)


def test_auto_never_multiplies_an_in_memory_quota(tmp_path):
    n, warning = resolve_workers("auto", _settings(tmp_path, LIMITS), cores=4)
    assert n == 1 and "HERO_RATE_LIMIT_URL" in warning


@pytest.mark.parametrize("shared", [{"rate_limit_url": "redis://127.0.0.1:6379/15"},
                                    {"broker_url": "redis://127.0.0.1:6379/14"}])
def test_auto_uses_every_core_when_quotas_are_shared(tmp_path, shared):
    assert resolve_workers("auto", _settings(tmp_path, LIMITS, **shared), cores=4) == (4, None)


def test_auto_keeps_an_in_memory_database_in_one_process(tmp_path):
    assert resolve_workers("auto", _settings(tmp_path, NO_LIMITS, database_url="sqlite://"), cores=4) == (1, None)


def test_an_explicit_count_is_kept_and_warned_about(tmp_path):
    n, warning = resolve_workers(3, _settings(tmp_path, LIMITS), cores=2)
    assert n == 3 and "3x" in warning
    assert resolve_workers(3, _settings(tmp_path, NO_LIMITS), cores=2) == (3, None)
    assert resolve_workers(1, _settings(tmp_path, LIMITS), cores=2) == (1, None)


def test_the_shipped_policy_has_quotas_so_auto_is_one(tmp_path):
    settings = Settings(home=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'x.db'}")
    assert resolve_workers("auto", settings, cores=2)[0] == 1


def test_workers_flag_values():
    assert _workers_arg("auto") == "auto" and _workers_arg("2") == 2
    for bad in ("0", "-1", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            _workers_arg(bad)


def test_serve_logs_the_warning(tmp_path, monkeypatch):
    import uvicorn

    from verifier.base import logs
    from verifier.cli import serve, serve_workers

    calls, warnings = {}, []
    monkeypatch.setattr(uvicorn, "run", lambda target, **kw: pytest.fail("one worker's uvicorn.run"))
    monkeypatch.setattr(serve_workers, "run_workers", lambda target, **kw: calls.update(kw, target=target))
    monkeypatch.setattr(logs, "configure_logging", lambda level: None)  # global handlers stay as the suite set them
    monkeypatch.setattr(serve.log, "warning", lambda msg, *a, **kw: warnings.append(msg))
    settings = _with_secrets(_settings(tmp_path, LIMITS))
    args = argparse.Namespace(workers=2, host=None, port=None, hero_settings=settings)
    serve.cmd_serve(args)
    assert calls["workers"] == 2 and calls["factory"] is True and calls["target"] == "verifier.api.app:app_from_env"
    assert any("up to 2x its configured quota" in w for w in warnings)


@pytest.mark.parametrize("workers, serial", [(2, True), (1, False)])
def test_serve_computes_in_calling_threads_only_with_several_workers(tmp_path, monkeypatch, workers, serial):
    """Several workers: each tokenizes and runs the kernel in its calling thread (tests/cli/test_tokenizer_threads.py);
    one worker keeps the pools."""
    import uvicorn

    from verifier.api import app
    from verifier.base import logs
    from verifier.cli import serve, serve_workers

    for name in (TOKENIZERS_PARALLELISM, OMP_NUM_THREADS):
        monkeypatch.setenv(name, "unset-below")
        monkeypatch.delenv(name)  # restored (absent) after the test, whatever cmd_serve sets
    monkeypatch.setattr(uvicorn, "run", lambda target, **kw: None)
    monkeypatch.setattr(serve_workers, "run_workers", lambda target, **kw: None)
    monkeypatch.setattr(logs, "configure_logging", lambda level: None)
    # one worker builds its app here: a stand-in, so this process neither loads the tokenizer nor freezes its heap
    ctx = SimpleNamespace(profile=SimpleNamespace(tokenizer="smollm2"),
                          tokenizers=SimpleNamespace(for_profile=lambda profile: None))
    monkeypatch.setattr(app, "create_app", lambda settings: SimpleNamespace(state=SimpleNamespace(ctx=ctx)))
    monkeypatch.setattr(app, "freeze_startup_heap", lambda: None)
    settings = _with_secrets(_settings(tmp_path, NO_LIMITS))
    serve.cmd_serve(argparse.Namespace(workers=workers, host=None, port=None, hero_settings=settings))
    assert (os.environ.get(TOKENIZERS_PARALLELISM) == "false") is serial
    assert (os.environ.get(OMP_NUM_THREADS) == "1") is serial  # the kernel and torch: one thread per worker
