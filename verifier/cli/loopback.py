"""Loopback binding hygiene for `hero serve`: hold the other loopback family's port too.

A service bound to 127.0.0.1:P leaves [::1]:P free, and clients that resolve `localhost` to ::1 first (most
resolvers, browsers) would talk to whichever process took it: a local process could read their tokens. So
`hero serve` on 127.0.0.1 (or ::1) also binds the twin address's port, without listening (nothing is served
there; nobody else can bind it), and refuses to start when someone already holds it. Not covered: the rest of
127.0.0.0/8 (127.0.0.2:P stays free; no client reaches it by name) and other hosts' names; docs/operations.md.
"""

from __future__ import annotations

import errno
import socket

TWINS = {"127.0.0.1": ("::1", socket.AF_INET6), "::1": ("127.0.0.1", socket.AF_INET),
         "localhost": ("::1", socket.AF_INET6)}


class LoopbackSquatted(RuntimeError):
    """Another process holds the twin loopback address of our port."""


def reserve_loopback_twin(host: str, port: int) -> socket.socket | None:
    """The held twin socket (keep it open while serving), or None when there is nothing to hold (not a
    loopback bind, an ephemeral port, no IPv6 on this host). Raises LoopbackSquatted when it is taken."""
    twin = TWINS.get(host)
    if twin is None or not port:
        return None
    addr, family = twin
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:  # the family is not supported here: nobody can squat it either
        return None
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((addr, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LoopbackSquatted(
                f"another process already uses {addr} port {port}: clients of 'localhost' could reach it "
                "instead of this service; stop it or choose another port") from None
        return None  # EADDRNOTAVAIL etc.: the address does not exist here
    return sock
