"""The micro-batcher hands results back to asyncio callers with one loop call per batch, skips callers that
went away, and still serves sync callers (verifier.verify.batcher)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from verifier.verify.batcher import Batcher


def _req(*texts: str):
    return SimpleNamespace(job=SimpleNamespace(texts=texts))


def test_async_callers_share_one_loop_call_per_batch(monkeypatch):
    gate, started = threading.Event(), threading.Event()
    sizes: list[int] = []  # one entry per batch served: its callers

    def process(reqs):
        sizes.append(len(reqs))
        started.set()
        gate.wait(600)
        return [ValueError("bad") if r.job.texts[0] == "bad" else [{"text": t} for t in r.job.texts] for r in reqs]

    b = Batcher(process, window_s=0.05)

    async def main():
        loop = asyncio.get_running_loop()
        calls = []
        real = loop.call_soon_threadsafe

        def counting(cb, *args, **kw):
            calls.append(cb)
            return real(cb, *args, **kw)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
        first = asyncio.ensure_future(b.verify(_req("warm")))  # the worker takes this one alone and waits
        for _ in range(60_000):  # until the worker holds it (an event, not a fixed sleep: any machine speed);
            if started.is_set():  # polled on the loop, as a thread hand-off would add a loop call of its own
                break
            await asyncio.sleep(0.01)
        tasks = [asyncio.ensure_future(b.verify(_req(f"t{i}"))) for i in range(5)]
        bad = asyncio.ensure_future(b.verify(_req("bad")))
        gone = asyncio.ensure_future(b.verify(_req("gone")))
        await asyncio.sleep(0.05)  # any wait: the seven callers queue at their first step on the loop
        gone.cancel()  # the client went away while its batch was being served
        gate.set()
        assert await first == [{"text": "warm"}]
        assert [await t for t in tasks] == [[{"text": f"t{i}"}] for i in range(5)]
        with pytest.raises(ValueError, match="bad"):
            await bad
        assert gone.cancelled()
        return calls

    calls = asyncio.run(main())
    assert len(calls) == 2  # one for the lone first batch, one for the other seven callers together
    assert sizes == [1, 7]
    assert b.submit(_req("sync")).result(10) == [{"text": "sync"}]  # sync callers: a concurrent future
    b.close()


def test_a_closed_loop_does_not_stop_the_worker():
    gate = threading.Event()

    def process(reqs):
        gate.wait(10)
        return [[{"ok": 1}] for _ in reqs]

    b = Batcher(process)

    async def give_up():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(b.verify(_req("x")), 0.05)

    asyncio.run(give_up())  # the loop is closed before the worker answers it
    gate.set()
    assert b.submit(_req("y")).result(10) == [{"ok": 1}]  # the worker survived the closed loop
    b.close()
