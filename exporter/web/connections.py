"""The HTTP server's open connections: a fixed number of slots, idle ones given up first under pressure."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import Dict, Optional

from exporter.base.logs import log

# One warning per this many seconds at most, however many connections are refused meanwhile.
_REFUSAL_LOG_INTERVAL_SECONDS = 10.0


class _Entry:
    __slots__ = ("key", "sock", "idle_since", "order")

    def __init__(self, sock: socket.socket, order: int) -> None:
        self.key = id(sock)  # of the socket accepted, also once `sock` is its TLS wrapper
        self.sock = sock
        self.idle_since: Optional[float] = time.monotonic()  # None while a request is being answered
        self.order = order


class ConnectionTable:
    """Which connections hold the server's slots and whether each is idle or answering a request.

    A connection is idle from its accept until its request head is complete (a TLS handshake, the
    wait for a first byte, a request head trickling in) and again between kept-alive requests. When
    every slot is taken, a new connection takes the slot of the connection idle the longest, which
    is shut down; it is refused only when every slot is answering a request. So idle or slow
    clients can never keep out a scrape or the kubelet's /healthz probe.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.refused = 0  # new connections closed because every slot was answering a request
        self.evicted = 0  # idle connections closed to make room for a new one
        self._lock = threading.Lock()
        self._entries: Dict[int, _Entry] = {}  # by id() of the socket accepted
        self._local = threading.local()  # the entry of the connection this thread serves
        self._order = itertools.count()
        self._refusals_unlogged = 0
        self._refusal_logged_at = float("-inf")

    def admit(self, sock: socket.socket, client: str) -> bool:
        """Take a slot for a new connection, closing the longest-idle one if need be."""
        with self._lock:
            victim = None
            if len(self._entries) >= self.limit:
                victim = self._longest_idle()
                if victim is None:
                    self.refused += 1
                    self._log_refusal(client)
                    return False
                del self._entries[victim.key]
                self.evicted += 1
            entry = _Entry(sock, next(self._order))
            self._entries[entry.key] = entry
        if victim is not None:
            _shut_down(victim.sock)
        return True

    def bind(self, sock: socket.socket) -> None:
        """Called on the connection's own thread, which serves it to the end: the calls below then
        need no socket (a TLS wrapper is a different object from the socket accepted)."""
        with self._lock:
            self._local.entry = self._entries.get(id(sock))

    def replace(self, new: socket.socket) -> None:
        """This thread's connection is now used through `new` (its TLS wrapper)."""
        entry = getattr(self._local, "entry", None)
        if entry is not None:
            with self._lock:
                entry.sock = new

    def busy(self) -> None:
        """This thread's connection is answering a request: never closed to make room."""
        self._set_idle_since(None, only_if_busy=False)

    def idle(self) -> None:
        """This thread's connection waits for a request. Idle since its accept, or since its last
        answer: the order of connections' threads reaching this point does not matter."""
        self._set_idle_since(time.monotonic(), only_if_busy=True)

    def release(self, sock: socket.socket) -> None:
        with self._lock:
            self._entries.pop(id(sock), None)
        self._local.entry = None

    def _set_idle_since(self, value: Optional[float], only_if_busy: bool) -> None:
        entry = getattr(self._local, "entry", None)
        if entry is not None:
            with self._lock:
                if entry.idle_since is None or not only_if_busy:
                    entry.idle_since = value

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _longest_idle(self) -> Optional[_Entry]:
        idle = [entry for entry in self._entries.values() if entry.idle_since is not None]
        return min(idle, key=lambda entry: (entry.idle_since, entry.order), default=None)

    def _log_refusal(self, client: str) -> None:
        self._refusals_unlogged += 1
        now = time.monotonic()
        if now - self._refusal_logged_at < _REFUSAL_LOG_INTERVAL_SECONDS:
            return
        log("warn", f"all {self.limit} connection slots are answering requests: refusing new connections "
            "(counted in pod_gpu_exporter_http_connections_refused_total); are scrapes piling up behind a "
            "slow upstream exporter?", client=client, refused_since_last_warning=self._refusals_unlogged)
        self._refusals_unlogged, self._refusal_logged_at = 0, now


def _shut_down(sock: socket.socket) -> None:
    """Wake the connection's thread (blocked reading) so it ends and lets its socket go. The plain
    socket's shutdown, also for a TLS socket: SSLSocket.shutdown would drop its TLS state under a
    thread that may be using it."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by its own thread
