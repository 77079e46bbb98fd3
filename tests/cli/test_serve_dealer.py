"""`hero serve --workers N`: the supervisor accepts and deals each connection to the next ready worker, so
connections opened together are split evenly (with a shared socket the first worker to wake took them all;
with a socket per worker and SO_REUSEPORT, a hash split 8 connections 6/2 or worse in a quarter of tries)."""

from __future__ import annotations

import http.client
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest

from tests.helpers.workers import REPO, free_port
from verifier.cli.serve_workers import READY, Dealer, bind_listener, dispatch_supported

pytestmark = pytest.mark.skipif(not dispatch_supported(), reason="this OS cannot pass descriptors")

RUN = ("from verifier.cli.serve_workers import run_workers; "
       "run_workers('tests.helpers.pid_app:app', workers=2, host='127.0.0.1', port={port}, log_config=None, "
       "timeout_worker_healthcheck=5)")


def _received(chan: socket.socket, wait: float = 0.3) -> list[socket.socket]:
    """The connections dealt to `chan` so far (waits `wait` s for the first)."""
    out = []
    while select.select([chan], [], [], wait)[0]:
        msg, fds, _, _ = socket.recv_fds(chan, 1, 1)
        if not msg:
            break
        out += [socket.socket(fileno=fd) for fd in fds]
        wait = 0.05
    return out


def _until(pred, timeout: float = 120.0) -> None:  # polled: a bound for a loaded machine
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def dealer():
    d = Dealer(bind_listener("127.0.0.1", 0, 64))
    d.start()
    clients: list[socket.socket] = []

    def connect(n: int) -> list[tuple]:
        port = d.listener.getsockname()[1]
        new = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        clients.extend(new)
        return [c.getsockname() for c in new]

    d.connect = connect  # type: ignore[attr-defined]
    yield d
    d.close()
    for c in clients:
        c.close()


def _ready(d: Dealer, n: int) -> list[socket.socket]:
    chans = [d.attach() for _ in range(n)]
    for c in chans:
        c.send(READY)
    _until(lambda: d.ready_count() == n)
    return chans


def test_connections_opened_together_are_dealt_in_turn(dealer):
    a, b = _ready(dealer, 2)
    dealer.open()
    clients = dealer.connect(8)
    got_a, got_b = _received(a), _received(b)
    assert len(got_a) == 4 and len(got_b) == 4, (len(got_a), len(got_b))
    # each worker holds the very connections the clients opened (their peer is a client's address)
    assert sorted(c.getpeername() for c in got_a + got_b) == sorted(clients)
    for c in got_a + got_b:
        c.close()
    assert dealer.dealt == 8


def test_nothing_is_dealt_before_open_and_nothing_to_a_worker_not_ready(dealer):
    ready = _ready(dealer, 1)[0]
    starting = dealer.attach()  # its app has not started: no READY yet
    dealer.connect(2)
    assert _received(ready) == []  # not open: the connections wait in the backlog
    dealer.open()
    first = _received(ready)
    assert len(first) == 2 and _received(starting, 0.1) == []
    starting.send(READY)
    _until(lambda: dealer.ready_count() == 2)
    dealer.connect(4)
    assert len(_received(ready)) == 2 and len(_received(starting)) == 2


def test_a_worker_gone_gets_nothing_more(dealer):
    a, b = _ready(dealer, 2)
    dealer.open()
    b.close()  # the worker exited or crashed
    _until(lambda: dealer.ready_count() == 1)
    dealer.connect(6)
    assert len(_received(a)) == 6


def test_the_dealer_goes_on_after_an_unexpected_error(dealer, monkeypatch):
    (a,) = _ready(dealer, 1)
    dealer.open()
    real, calls = Dealer._deal, []

    def flaky(self, conn):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        real(self, conn)

    monkeypatch.setattr(Dealer, "_deal", flaky)
    dealer.connect(1)  # lost (closed) with the error
    _until(lambda: calls)
    dealer.connect(2)
    assert len(_received(a)) == 2


def test_a_port_in_use_is_an_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            bind_listener("127.0.0.1", taken.getsockname()[1], 16)


def _pids(port: int, n: int) -> Counter:
    """n connections opened together, one request each: how many each worker served."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(n)]
    for c in conns:
        c.connect()
    try:
        out = Counter()
        for c in conns:
            c.request("GET", "/")
            out[int(c.getresponse().read())] += 1
        return out
    finally:
        for c in conns:
            c.close()


def _workers(parent: psutil.Process) -> list[int]:
    """Pids of the supervisor's live workers (not multiprocessing's resource tracker, its other child)."""
    out = []
    for p in parent.children():
        try:
            if "--multiprocessing-fork" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


@pytest.mark.slow
def test_serve_splits_connections_evenly_and_a_replacement_takes_its_share():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RUN.format(port=port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 600  # polled: a bound for a loaded machine, not a speed target
        while True:  # the first answer comes only once both workers are up
            try:
                first = _pids(port, 1)
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.2)
        parent = psutil.Process(proc.pid)
        workers = _workers(parent)
        assert len(workers) == 2 and set(first) <= set(workers)
        for _ in range(3):
            assert _pids(port, 8) == Counter(dict.fromkeys(workers, 4))

        dead, alive = workers
        os.kill(dead, signal.SIGKILL)
        _until(lambda: len(set(_workers(parent)) - {dead}) == 2, timeout=600)
        (new,) = set(_workers(parent)) - {dead, alive}
        _until(lambda: set(_pids(port, 2)) == {alive, new}, timeout=600)  # the replacement serves once ready
        assert _pids(port, 8) == Counter({alive: 4, new: 4})
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
