"""`hero serve` with several workers: uvicorn's supervisor, but one SO_REUSEPORT listening socket per worker.

uvicorn's workers share one listening socket, and whichever worker's event loop wakes first accepts every
connection waiting: eight connections opened together often all went to one of two workers, which then
served them alone on one core (docs/performance.md, sessions 9 and 10). With a socket per worker, each
bound with SO_REUSEPORT, the kernel spreads new connections over the workers by a hash of their addresses.
Worker i always listens on socket i: a worker restarted after a crash (or SIGHUP) takes its predecessor's
socket, so the connections queued on it are served, not dropped.
"""

from __future__ import annotations

import logging
import os
import socket

from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

log = logging.getLogger("uvicorn.error")

OMP_NUM_THREADS = "OMP_NUM_THREADS"  # torch intra-op threads, so the evidence kernel's (cpu_kernel.default_threads)


def compute_in_calling_threads() -> None:
    """For worker processes that are one per core: each tokenizes (verifier.lm.tokenize_in_calling_thread) and
    runs the evidence kernel and torch in its calling thread. The kernel otherwise starts a thread per call for
    larger batches, and torch keeps a pool per process, on the cores the other workers need: 32 auditor clients
    (v1 profile) took 0.72-0.95 ms of server CPU per text with them and 0.60-0.62 without, moderators 0.51-0.53
    against 0.48-0.50 (docs/performance.md, session 10). Explicit settings win; processes started afterwards
    inherit them."""
    from verifier.lm import tokenize_in_calling_thread

    tokenize_in_calling_thread()
    os.environ.setdefault(OMP_NUM_THREADS, "1")


def reuse_port_supported() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def bind_reuse_port(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` TCP sockets bound to one address with SO_REUSEPORT (port 0: the port the first one got)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    out: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.set_inheritable(True)  # handed to the worker processes
    except OSError:
        for sock in out:
            sock.close()
        raise
    return out


class SocketPerWorker(Multiprocess):
    """uvicorn's `Multiprocess` (health checks, restarts, SIGHUP, SIGINT/SIGTERM), worker i on socket i.
    The worker count is fixed: SIGTTIN/SIGTTOU would need sockets bound after start, and are ignored."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)
        if len(sockets) != self.processes_num:
            raise ValueError("one socket per worker")

    def _start(self, slot: int) -> Process:
        process = Process(self.config, [self.sockets[slot]])
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self._start(slot) for slot in range(self.processes_num)]

    def keep_subprocess_alive(self) -> None:
        """As uvicorn's, the replacement on the dead worker's socket."""
        if self.should_exit.is_set():
            return
        for slot, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung: kill it
            process.join()
            if process.exitcode == STARTUP_FAILURE:  # the app itself cannot start: restarting will not help
                log.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.info(f"Child process [{process.pid}] died")
            self.processes[slot] = self._start(slot)

    def restart_all(self) -> None:
        """SIGHUP, as uvicorn's: each worker's replacement serves (on the same socket) before the old one goes."""
        for slot, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._start(slot)
            if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                new.kill()
                new.join()
                if not self.should_exit.is_set():
                    log.error(f"New child process [{new.pid}] was not ready in time; keeping worker [{old.pid}].")
                return
            old.terminate()
            old.join()
            self.processes[slot] = new

    def handle_ttin(self) -> None:
        log.info("Received SIGTTIN: the number of workers is fixed (one listening socket each); ignored.")

    def handle_ttou(self) -> None:
        log.info("Received SIGTTOU: the number of workers is fixed (one listening socket each); ignored.")


def run_workers(app: str, *, workers: int, host: str, port: int, **options) -> None:
    """`uvicorn.run(app, workers=N, ...)`, with a listening socket per worker when N > 1 (where the OS has
    SO_REUSEPORT). `app` is an app object only with one worker."""
    import uvicorn

    if workers < 2 or not reuse_port_supported():
        uvicorn.run(app, workers=workers, host=host, port=port, **options)
        return
    config = Config(app, workers=workers, host=host, port=port, **options)
    try:
        sockets = bind_reuse_port(host, port, workers)
    except OSError as exc:
        log.error(exc)
        raise SystemExit(STARTUP_FAILURE) from None
    shown = f"[{host}]" if ":" in host else host
    log.info(f"Uvicorn running on http://{shown}:{sockets[0].getsockname()[1]} ({workers} listening sockets)")
    try:
        SocketPerWorker(config, sockets).run()
    except KeyboardInterrupt:
        pass
    finally:
        for sock in sockets:
            sock.close()
