"""In-process JobRunner: decodes in the calling (worker) thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from verifier.engine.profile import Profile
from verifier.jobs.base import DecodeJob
from verifier.jobs.decode import LockedTokenizer, run_decode
from verifier.keys.service import DbKeyStore


def default_tokenizer_loader(name: str) -> Any:
    from verifier.engine.models import load_tokenizer

    return load_tokenizer(name)


class InProcessJobRunner:
    def __init__(
        self,
        store: DbKeyStore,
        profiles: Callable[[str], Profile],
        tokenizer_loader: Callable[[str], Any] = default_tokenizer_loader,
    ) -> None:
        self.store = store
        self.profiles = profiles
        self.tokenizer_loader = tokenizer_loader
        self._tokenizers: dict[str, LockedTokenizer] = {}
        self._lock = threading.Lock()

    def tokenizer(self, name: str) -> LockedTokenizer:
        with self._lock:
            if name not in self._tokenizers:
                self._tokenizers[name] = LockedTokenizer(self.tokenizer_loader(name))
            return self._tokenizers[name]

    def decode(self, job: DecodeJob, timeout: float | None = None) -> list[dict]:
        profile = self.profiles(job.profile)
        tok = self.tokenizer(profile.tokenizer)
        return run_decode(self.store, profile, list(job.texts), job.max_level, job.alpha, tok)

    def close(self) -> None:
        self._tokenizers.clear()
