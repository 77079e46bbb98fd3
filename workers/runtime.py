"""Per-process worker state, built lazily on the first task (never at import or fork): DB engine, key
store, policy, and tokenizers (loaded once per process)."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from verifier.jobs.decode import LockedTokenizer
from verifier.jobs.drain import DrainContext
from verifier.settings import Settings


def test_delay_s() -> float:
    """HERO_WORKER_TEST_DELAY_S is honoured only with HERO_TEST_HOOKS=1 (tests kill a worker mid-job)."""
    if os.environ.get("HERO_TEST_HOOKS") != "1":
        return 0.0
    return float(os.environ.get("HERO_WORKER_TEST_DELAY_S", "0") or 0)


def pick_device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Runtime:
    def __init__(self, settings: Settings) -> None:
        from verifier.app import resolve_profile
        from verifier.auth.policy import load_policy
        from verifier.db import Database
        from verifier.keys.kek import make_kek_provider
        from verifier.keys.service import DbKeyStore

        self.settings = settings
        self.db = Database(settings.db_url)
        self.store = DbKeyStore(self.db, make_kek_provider(settings))
        self.policy = load_policy(settings.roles_file)
        self.profiles = resolve_profile
        self.device = pick_device(settings.worker_device)
        self._tokenizers: dict[str, LockedTokenizer] = {}
        self._lock = threading.Lock()
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def tokenizer(self, name: str) -> Any:
        with self._lock:
            if name not in self._tokenizers:
                from verifier.engine.models import load_tokenizer

                self._tokenizers[name] = LockedTokenizer(load_tokenizer(name))
            return self._tokenizers[name]

    def context(self) -> DrainContext:
        s = self.settings
        return DrainContext(
            db=self.db, store=self.store, profiles=self.profiles, tokenizer=self.tokenizer, policy=self.policy,
            worker=self.name, batch_size=s.job_batch_size, lease_s=s.job_lease_seconds,
            max_attempts=s.job_max_attempts, device=self.device, delay_s=test_delay_s(),
        )


_runtime: Runtime | None = None
_pid: int | None = None
_lock = threading.Lock()


def runtime() -> Runtime:
    global _runtime, _pid
    with _lock:
        if _runtime is None or _pid != os.getpid():
            _runtime = Runtime(Settings())
            _pid = os.getpid()
        return _runtime
