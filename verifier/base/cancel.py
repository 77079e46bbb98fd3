"""Deadlines and cancellation for long decodes (model-aware scoring): a wall-clock limit per decode, the caller's
disconnect, and the process shutting down (SIGTERM) all stop the work at its next check, within seconds.

A decode runs in a worker thread, which Python cannot interrupt; so the work checks its `Deadline` between
steps (each forward pass of the LM, each of its layers, each chunk of positions) and raises `DecodeStopped`
there. Every started deadline is listed while it runs, so /readyz can report a worker stuck past its deadline
(work that does not reach its next check, e.g. one enormous forward pass): `overdue()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType

from verifier.base.errors import Unavailable

# Set when the process is asked to stop (verifier/api/app.py wraps the server's SIGTERM/SIGINT handlers): every
# running deadline then stops at its next check, so a shutdown never waits for a long decode.
SHUTDOWN = threading.Event()


class DecodeStopped(Unavailable):
    """The decode was stopped before its end: deadline passed, caller gone, or the process shutting down."""

    headers = MappingProxyType({"Retry-After": "1"})


class Deadline:
    """`seconds` of wall clock from now (None: no limit), and an optional `cancel` event (the caller left)."""

    def __init__(self, seconds: float | None = None, cancel: threading.Event | None = None, what: str = "decode",
                 setting: str | None = None) -> None:
        self.started = time.monotonic()
        self.at = None if seconds is None else self.started + seconds
        self.seconds = seconds
        self.cancel = cancel
        self.what = what
        self.setting = setting

    def __repr__(self) -> str:
        return f"Deadline({self.what}, {self.seconds} s)"

    def passed(self, now: float | None = None) -> bool:
        return self.at is not None and (now if now is not None else time.monotonic()) > self.at

    def check(self) -> None:
        """Raises DecodeStopped when the work must stop; a no-op otherwise (cheap: call it often)."""
        if SHUTDOWN.is_set():
            raise DecodeStopped(f"{self.what} stopped: the service is shutting down; nothing was released")
        if self.cancel is not None and self.cancel.is_set():
            raise DecodeStopped(f"{self.what} stopped: the request was cancelled; nothing was released")
        if self.passed():
            limit = f" ({self.setting}={self.seconds:g})" if self.setting else ""
            raise DecodeStopped(f"{self.what} ran past its deadline of {self.seconds:g} s{limit}; nothing was "
                                "released: send fewer or shorter texts")


_RUNNING: set[Deadline] = set()
_LOCK = threading.Lock()


@contextmanager
def running(deadline: Deadline) -> Iterator[Deadline]:
    """Lists `deadline` as in progress for as long as the work runs (see `overdue`)."""
    with _LOCK:
        _RUNNING.add(deadline)
    try:
        yield deadline
    finally:
        with _LOCK:
            _RUNNING.discard(deadline)


def overdue(grace_s: float = 5.0) -> int:
    """How many decodes in this process are still running `grace_s` past their deadline: a worker stuck where no
    check is reached. /readyz answers 503 while there is one."""
    now = time.monotonic()
    with _LOCK:
        return sum(1 for d in _RUNNING if d.at is not None and now > d.at + grace_s)
