"""A process-wide bound on model-aware work (issue 52, N2): at most `n` LM re-runs at once, the rest wait in a
short queue, and a request that cannot get a slot in time is answered 503 with Retry-After before anything is
charged or decoded.

Why: every model-aware decode runs the profile's LM over up to HERO_MODEL_AWARE_MAX_REQUEST_TOKENS tokens with all
of the host's cores; 4-6 of them side by side all missed their deadline (each charged and burning a minute of CPU),
pushed the resident memory from 0.45 to 5.4 GB and a small request beside them from 5 s to 17 s. One at a time
per couple of cores, each finishes in its own time. When the last running one ends, freed heap pages are handed
back to the OS (glibc `malloc_trim`), so memory comes back down after a burst.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from verifier.base.errors import Unavailable

GIB = 1 << 30
MEMORY_PER_SLOT = 2 * GIB  # a decode at the token caps (docs/performance.md): its activations and the allocator's slack


class Busy(Unavailable):
    """Every model-aware slot stayed taken for the whole wait: nothing was charged or decoded."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}  # type: ignore[misc]  (per instance)

    def detail(self) -> str:
        return str(self)


def auto_slots(cores: int | None = None, available: int | None = None) -> int:
    """Slots from the host: one per two cores (each decode's torch threads use them all), and no more than the
    available memory holds at MEMORY_PER_SLOT each; at least one."""
    cores = cores or os.cpu_count() or 1
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            available = MEMORY_PER_SLOT
    return max(1, min(cores // 2, available // MEMORY_PER_SLOT))


def _trimmer():
    name = ctypes.util.find_library("c")
    try:
        fn = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        fn = None
    return fn


_TRIM = _trimmer()


class WorkSlots:
    """`n` slots; `hold(wait_s)` takes one for a `with` block or raises Busy (503, Retry-After) after `wait_s`."""

    def __init__(self, n: int, wait_s: float) -> None:
        self.n, self.wait_s = max(1, int(n)), float(wait_s)
        self._cond = threading.Condition()
        self.running = 0
        self.waiting = 0

    def __repr__(self) -> str:
        return f"WorkSlots(n={self.n}, running={self.running}, waiting={self.waiting})"

    def acquire(self, wait_s: float | None = None, *, forever: bool = False) -> None:
        """One slot, waiting at most `wait_s` (default: the queue wait) or, `forever`, until one frees (a job's
        drain: its texts are admitted already, and a busy answer would fail the job)."""
        wait = None if forever else (self.wait_s if wait_s is None else wait_s)
        with self._cond:
            self.waiting += 1
            try:
                if not self._cond.wait_for(lambda: self.running < self.n, timeout=wait):
                    raise Busy(f"model-aware scoring is busy ({self.n} running, {self.waiting - 1} waiting); "
                               f"nothing was charged, retry later (HERO_MODEL_AWARE_CONCURRENCY={self.n})",
                               max(1, math.ceil(wait or 1)))
                self.running += 1
            finally:
                self.waiting -= 1

    def release(self) -> None:
        with self._cond:
            self.running -= 1
            idle = self.running == 0
            self._cond.notify()
        if idle and _TRIM is not None:
            _TRIM(0)  # the burst is over: hand freed heap pages back to the OS

    @contextmanager
    def hold(self, wait_s: float | None = None, *, forever: bool = False) -> Iterator[None]:
        self.acquire(wait_s, forever=forever)
        try:
            yield
        finally:
            self.release()
