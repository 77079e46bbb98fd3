"""Micro-batcher for POST /v1/verify: concurrent callers share one decode and one audit transaction.

Requests queue up while a batch is being served; the worker thread then takes everything queued (up to
`max_texts` texts), waiting at most `window_s` for more only when the previous batch was shared (a lone
client pays no wait). The batch goes through `verify_batch` (one tokenizer call and one kernel batch per
level group, group commit of the audit events); each caller's future resolves only after that commit, with
its own results and receipts, or with the error it must answer (every caller of a batch whose audit write
failed gets AuditUnavailable: 503, no result).

One worker thread, independent of any event loop: the endpoint awaits an asyncio future that the worker
resolves with ONE `loop.call_soon_threadsafe` per batch and loop (not `asyncio.wrap_future`, which costs a
concurrent future, two callbacks and a loop wake-up per caller); sync callers use `submit(...).result()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError

from verifier.verify.service import Outcome, VerifyRequest

log = logging.getLogger("hero.verify.batcher")

Process = Callable[[Sequence[VerifyRequest]], list[Outcome]]
_STOP = object()


class Batcher:
    def __init__(self, process: Process, *, window_s: float = 0.001, max_texts: int = 256) -> None:
        self.process = process
        self.window_s = window_s
        self.max_texts = max_texts
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.largest = 0  # the most callers one batch has served (a burst was coalesced when > 1)

    def __repr__(self) -> str:
        return f"Batcher(window_s={self.window_s}, max_texts={self.max_texts}, largest={self.largest})"

    def submit(self, request: VerifyRequest) -> Future:
        fut: Future = Future()
        self._put(request, fut)
        return fut

    def _put(self, request: VerifyRequest, waiter) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("verification batcher is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hero-verify-batcher", daemon=True)
                self._thread.start()
            self._q.put((request, waiter))

    async def verify(self, request: VerifyRequest) -> list[dict]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._put(request, (loop, fut))
        return await fut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
            self._q.put(_STOP)
        if thread is not None:
            thread.join(30)

    # -- worker ------------------------------------------------------------------------------
    def _collect(self, first, shared: bool) -> tuple[list, bool]:
        batch = [first]
        n = len(first[0].job.texts)
        deadline = time.monotonic() + (self.window_s if shared else 0.0)
        stop = False
        while n < self.max_texts:
            left = deadline - time.monotonic()
            try:
                item = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.append(item)
            n += len(item[0].job.texts)
        return batch, stop

    def _run(self) -> None:
        shared = False
        while True:
            first = self._q.get()
            if first is _STOP:
                return
            batch, stop = self._collect(first, shared)
            shared = len(batch) > 1
            self.largest = max(self.largest, len(batch))
            try:
                outcomes = self.process([req for req, _ in batch])
            except BaseException as exc:  # never leave a caller waiting
                log.error("verification batch failed", extra={"error": exc.__class__.__name__})
                outcomes = [exc] * len(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list] = {}
            for (_, waiter), out in zip(batch, outcomes, strict=True):
                if isinstance(waiter, tuple):  # (loop, asyncio future): resolved on its loop, below
                    by_loop.setdefault(waiter[0], []).append((waiter[1], out))
                    continue
                if waiter.cancelled():
                    continue
                # A future cancelled meanwhile (client gone) is skipped; its audit row stays, as it should.
                with contextlib.suppress(InvalidStateError):
                    if isinstance(out, BaseException):
                        waiter.set_exception(out)
                    else:
                        waiter.set_result(out)
            for loop, items in by_loop.items():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
                    loop.call_soon_threadsafe(_resolve, items)
            if stop:
                return


def _resolve(items: list) -> None:
    """On the callers' loop: one call for every caller of the batch on it."""
    for fut, out in items:
        if fut.done():  # cancelled meanwhile (client gone); its audit row stays, as it should
            continue
        if isinstance(out, BaseException):
            fut.set_exception(out)
        else:
            fut.set_result(out)
