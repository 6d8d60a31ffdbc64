"""What the demo's HTTP servers share: a threading server quiet about clients that hang up, and the connections
it holds open (kept alive between requests, as Go's servers keep them), so that stopping it closes them too:
a stopped server answers nothing, on an old connection either."""

from __future__ import annotations

import socket
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Set


class OpenConnections:
    """Each handler adds its connection on setup and drops it on finish; `shut_all` ends every one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Set[socket.socket] = set()

    def opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.discard(connection)

    def shut_all(self) -> None:
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            # shutdown() (not close()) wakes a handler thread blocked reading a keep-alive socket.
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its client


class QuietServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose handler threads never hold up the process's exit."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A client that hangs up (a closed browser tab, an exporter stopped, a test's impatient client), or a
        # kept-alive connection the server shut at its stop, is not news.
        if not isinstance(sys.exc_info()[1], OSError):  # ConnectionError and timeouts among them
            super().handle_error(request, client_address)
