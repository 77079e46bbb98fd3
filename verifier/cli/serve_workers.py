"""`hero serve` with several workers: uvicorn's supervisor, but the supervisor accepts and deals out connections.

uvicorn's workers share one listening socket, and whichever worker's event loop wakes first accepts every
connection waiting: eight connections opened together often all went to one of two workers, which then
served them alone on one core (docs/research/, 2026-11-27). A socket per worker bound with
SO_REUSEPORT (2026-11-27) lets the kernel pick by a hash of the addresses, which is a coin toss per
connection: 8 connections over 2 workers split 6/2 or worse in 27 % of tries (0/8 in 2 %), and such a run
serves at ~0.5-0.8 of a balanced one for as long as the connections live (2026-11-27).

So, as Node.js's cluster module does by default: the supervisor alone listens, accepts, and passes each
connection (its file descriptor, SCM_RIGHTS over a Unix socket pair per worker) to the next ready worker in
turn, which serves it as if it had accepted it. Eight connections opened together are split 4/4. A worker
gets connections only once its app has started, and none at all until every first worker has started (or
failed to, within the health-check timeout), so a client connecting early waits in the backlog instead of
piling onto the first worker up. A worker that dies is replaced on a new pair; SIGHUP replaces the workers
one by one, each replacement taking connections before its predecessor stops. The supervisor's work is one
accept and one sendmsg per connection, not per request. Where the OS cannot pass descriptors (no
`socket.send_fds`/SOCK_SEQPACKET), uvicorn's shared socket is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import socket
import threading
import time

from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE
from uvicorn.server import Server
from uvicorn.supervisors.multiprocess import Multiprocess, Process

log = logging.getLogger("uvicorn.error")

OMP_NUM_THREADS = "OMP_NUM_THREADS"  # torch intra-op threads, so the evidence kernel's (cpu_kernel.default_threads)
READY = b"r"  # worker -> supervisor on its channel, once its app has started
_CONN = b"c"  # supervisor -> worker: one message per connection, the descriptor as ancillary data


def compute_in_calling_threads() -> None:
    """For worker processes that are one per core: each tokenizes (verifier.lm.tokenize_in_calling_thread) and
    runs the evidence kernel and torch in its calling thread. The kernel otherwise starts a thread per call for
    larger batches, and torch keeps a pool per process, on the cores the other workers need: 32 auditor clients
    (v1 profile) took 0.72-0.95 ms of server CPU per text with them and 0.60-0.62 without, moderators 0.51-0.53
    against 0.48-0.50 (docs/research/, 2026-11-27). Explicit settings win; processes started afterwards
    inherit them."""
    from verifier.lm import tokenize_in_calling_thread

    tokenize_in_calling_thread()
    os.environ.setdefault(OMP_NUM_THREADS, "1")


def dispatch_supported() -> bool:
    return hasattr(socket, "send_fds") and hasattr(socket, "SOCK_SEQPACKET") and hasattr(socket, "AF_UNIX")


def bind_listener(host: str, port: int, backlog: int) -> socket.socket:
    """The supervisor's one listening socket (SO_REUSEADDR only: nobody else may bind the port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


# -- worker side ---------------------------------------------------------------------------------------
class DispatchedServer(Server):
    """A uvicorn server whose connections come over `channel` (already accepted by the supervisor)."""

    def __init__(self, config: Config, channel: socket.socket) -> None:
        super().__init__(config)
        self.channel = channel

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the app (lifespan) only: no listening socket of its own
        config, loop = self.config, asyncio.get_running_loop()

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop)

        self.channel.setblocking(False)
        loop.add_reader(self.channel.fileno(), self._take, loop, create_protocol)
        self.channel.send(READY)

    def _take(self, loop: asyncio.AbstractEventLoop, create_protocol) -> None:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(self.channel, 1, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg and not fds:  # the supervisor is gone: nothing more will come; stop like on SIGTERM
                loop.remove_reader(self.channel.fileno())
                self.should_exit = True
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.setblocking(False)
                loop.create_task(loop.connect_accepted_socket(create_protocol, conn, ssl=self.config.ssl))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        with contextlib.suppress(ValueError, OSError):  # ValueError: already closed
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
        self.channel.close()  # the supervisor stops dealing to this worker at once
        await super().shutdown(sockets=None)


class DispatchedProcess(Process):
    """uvicorn's worker process (health checks, SIGTERM), serving the connections sent over `channel`."""

    def __init__(self, config: Config, channel: socket.socket) -> None:
        super().__init__(config, [channel])

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover (child process)
        (channel,) = sockets or [None]
        self._server = DispatchedServer(self.config, channel)
        super().target(sockets=None)


# -- supervisor side -----------------------------------------------------------------------------------
class Dealer:
    """Accepts on `listener` and passes each connection to the next ready worker, round robin.

    Runs on its own thread; `attach`, `open` and `close` come from the supervisor's thread. A worker is ready
    once its channel has said READY; its channel at EOF (exit, crash) takes it out. Until `open` has been
    called no connection is accepted (they wait in the backlog)."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._lock = threading.Lock()
        self._attached: list[socket.socket] = []  # channels made by `attach`, not yet watched here
        self._ready: list[socket.socket] = []  # in turn order; changed on the dealer's thread only
        self._next = 0
        self._open = threading.Event()
        self._stop = False
        self.dealt = 0  # connections handed out (statistics, tests)
        self._thread = threading.Thread(target=self._run, name="hero-dealer", daemon=True)

    def start(self) -> None:
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()

    def attach(self) -> socket.socket:
        """A new channel pair: the supervisor's end is watched here; the worker's end is returned (for its
        Process, and to be closed here once that process has started)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        with self._lock:
            self._attached.append(ours)
        self._wake()
        return theirs

    def open(self) -> None:
        """Start accepting (after the first workers are up)."""
        self._open.set()
        self._wake()

    def ready_count(self) -> int:
        return len(self._ready)

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()
        self._wake_w.close()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")

    def _run(self) -> None:
        listening = False
        while not self._stop:
            if self._open.is_set() and not listening and self._ready:
                self._sel.register(self.listener, selectors.EVENT_READ, "listen")
                listening = True
            elif listening and not self._ready:  # nobody to give connections to: let them wait in the backlog
                self._sel.unregister(self.listener)
                listening = False
            try:
                for key, _ in self._sel.select(timeout=1.0):
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        self._watch_attached()
                    elif key.data == "listen":
                        self._accept_all()
                    else:
                        self._from_worker(key.fileobj)  # type: ignore[arg-type]
            except Exception:  # a dealer that stopped would be a silent outage: log it and go on
                if self._stop:
                    return
                log.exception("connection dealer error")
                time.sleep(0.1)

    def _watch_attached(self) -> None:
        with self._lock:
            attached, self._attached = self._attached, []
        for chan in attached:
            self._sel.register(chan, selectors.EVENT_READ, "worker")

    def _from_worker(self, chan: socket.socket) -> None:
        try:
            msg = chan.recv(16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg = b""
        if msg == READY:
            self._ready.append(chan)
            return
        if not msg:  # the worker is gone (or shutting down)
            self._drop(chan)

    def _drop(self, chan: socket.socket) -> None:
        if chan in self._ready:
            self._ready.remove(chan)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(chan)
        chan.close()

    def _accept_all(self) -> None:
        while self._ready:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: leave the rest in the backlog for now
                log.warning(f"accept failed: {exc}")
                time.sleep(0.01)
                return
            with conn:
                self._deal(conn)

    def _deal(self, conn: socket.socket) -> None:
        """To the next ready worker; one that cannot take it (gone, or its queue full) is skipped."""
        for _ in range(len(self._ready)):
            if not self._ready:
                break
            self._next %= len(self._ready)
            chan = self._ready[self._next]
            self._next += 1
            try:
                socket.send_fds(chan, [_CONN], [conn.fileno()])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                self._drop(chan)
                continue
            self.dealt += 1
            return
        log.warning("no worker could take a connection: closed")


class DealingSupervisor(Multiprocess):
    """uvicorn's `Multiprocess` (health checks, restarts, SIGHUP, SIGINT/SIGTERM) with a `Dealer` in front.
    The worker count is fixed: SIGTTIN/SIGTTOU are ignored."""

    def __init__(self, config: Config, listener: socket.socket) -> None:
        super().__init__(config, [])
        self.dealer = Dealer(listener)

    def _start(self) -> Process:
        theirs = self.dealer.attach()
        process = DispatchedProcess(self.config, theirs)
        process.start()
        theirs.close()  # the child has its own copy now: EOF on ours means the worker is gone
        return process

    def init_processes(self) -> None:
        self.dealer.start()
        self.processes = [self._start() for _ in range(self.processes_num)]
        deadline = time.monotonic() + self.config.timeout_worker_healthcheck
        for p in self.processes:  # everyone up (or late) before the first connection is dealt
            p.wait_until_ready(max(0.1, deadline - time.monotonic()), self.should_exit)
        self.dealer.open()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.dealer.close()

    def terminate_all(self) -> None:
        self.dealer.close()  # stop taking connections first (new ones are refused, as with uvicorn's socket)
        super().terminate_all()

    def keep_subprocess_alive(self) -> None:
        """As uvicorn's, the replacement with a new channel."""
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
            self.processes[slot] = self._start()

    def restart_all(self) -> None:
        """SIGHUP, as uvicorn's: each worker's replacement takes connections before the old one goes."""
        for slot, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._start()
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
        log.info("Received SIGTTIN: the number of workers is fixed; ignored.")

    def handle_ttou(self) -> None:
        log.info("Received SIGTTOU: the number of workers is fixed; ignored.")


def run_workers(app: str, *, workers: int, host: str, port: int, **options) -> None:
    """`uvicorn.run(app, workers=N, ...)`, the connections dealt out by the supervisor when N > 1 (where the
    OS can pass descriptors). `app` is an app object only with one worker."""
    import uvicorn

    if workers < 2 or not dispatch_supported():
        uvicorn.run(app, workers=workers, host=host, port=port, **options)
        return
    config = Config(app, workers=workers, host=host, port=port, **options)
    try:
        listener = bind_listener(host, port, config.backlog)
    except OSError as exc:
        log.error(exc)
        raise SystemExit(STARTUP_FAILURE) from None
    shown = f"[{host}]" if ":" in host else host
    log.info(f"Uvicorn running on http://{shown}:{listener.getsockname()[1]} ({workers} workers, connections "
             "dealt in turn)")
    try:
        DealingSupervisor(config, listener).run()
    except KeyboardInterrupt:
        pass
