"""`hero serve --workers N`: each worker listens on its own SO_REUSEPORT socket, so the kernel spreads
connections over the workers (with one shared socket, the first worker to wake took every waiting one)."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests.helpers.workers import REPO, free_port
from verifier.cli.serve_workers import bind_reuse_port, reuse_port_supported

pytestmark = pytest.mark.skipif(not reuse_port_supported(), reason="no SO_REUSEPORT on this OS")

RUN = ("from verifier.cli.serve_workers import run_workers; "
       "run_workers('tests.helpers.pid_app:app', workers=2, host='127.0.0.1', port={port}, log_config=None, "
       "timeout_worker_healthcheck=2)")


def test_the_kernel_spreads_connections_over_the_sockets():
    socks = bind_reuse_port("127.0.0.1", 0, 3)
    try:
        port = socks[0].getsockname()[1]
        assert {s.getsockname()[1] for s in socks} == {port}
        for s in socks:
            s.listen(128)
            s.setblocking(False)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
        time.sleep(0.2)
        accepted = []
        for s in socks:
            n = 0
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                conn.close()
                n += 1
            accepted.append(n)
        for c in clients:
            c.close()
        # a hash of the addresses picks the socket: none of three gets nothing in ~3 (2/3)^64 ~ 2e-11 of runs
        assert sum(accepted) == 64 and min(accepted) > 0, accepted
    finally:
        for s in socks:
            s.close()


def test_a_port_in_use_is_an_error_not_a_silent_share():
    with socket.socket() as taken:  # bound without SO_REUSEPORT: no one may share it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            bind_reuse_port("127.0.0.1", taken.getsockname()[1], 2)


def _get_pid(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/")
        return int(conn.getresponse().read())
    finally:
        conn.close()


def _listening_inodes(pid: int, port: int) -> set[str]:
    out = set()
    for c in psutil.Process(pid).net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port:
            out.add(os.readlink(f"/proc/{pid}/fd/{c.fd}"))
    return out


def _workers(parent: psutil.Process) -> list[int]:
    """Pids of the supervisor's live workers (not multiprocessing's resource tracker, its other child)."""
    out = []
    for p in parent.children():
        try:
            if "--multiprocessing-fork" in p.cmdline():
                out.append(p.pid)
        except psutil.Error:  # gone, or a zombie not yet reaped
            continue
    return out


def _wait_workers(parent: psutil.Process, port: int, want: int, exclude: tuple[int, ...] = ()) -> list[int]:
    deadline = time.time() + 60
    while True:
        pids = [p for p in _workers(parent) if p not in exclude]
        try:
            if len(pids) == want and all(_listening_inodes(p, port) for p in pids):
                return pids
        except psutil.Error:
            pass
        assert time.time() < deadline, "the workers did not start listening"
        time.sleep(0.1)


@pytest.mark.slow
def test_each_worker_listens_on_its_own_socket_and_a_restart_takes_it_over():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RUN.format(port=port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        parent = psutil.Process(proc.pid)
        workers = _wait_workers(parent, port, 2)
        sockets = [_listening_inodes(w, port) for w in workers]
        assert all(len(s) == 1 for s in sockets) and sockets[0] != sockets[1], sockets  # shared: equal

        # 32 connections at once: both workers answer (one shared socket gave all of them to one worker)
        with ThreadPoolExecutor(32) as pool:
            assert set(pool.map(lambda _: _get_pid(port), range(32))) == set(workers)

        # a worker killed: its replacement listens on the same socket, and both sockets' connections are served
        dead, alive = workers
        dead_socket = _listening_inodes(dead, port)
        os.kill(dead, signal.SIGKILL)
        (new,) = _wait_workers(parent, port, 1, exclude=(dead, alive))
        assert _listening_inodes(new, port) == dead_socket
        with ThreadPoolExecutor(32) as pool:
            assert set(pool.map(lambda _: _get_pid(port), range(32))) == {alive, new}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
