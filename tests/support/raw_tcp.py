"""A loopback TCP server that hands each connection to a function of the test's: for upstreams and API
servers that misbehave below HTTP (answers nobody asked for, connections never answered)."""

from __future__ import annotations

import socket
import threading
from typing import Callable


def http_answer(body: bytes) -> bytes:
    """One whole HTTP/1.1 200 answer carrying `body`, as raw bytes."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class RawTcpServer:
    """Accepts on 127.0.0.1 (a free port) and runs `handle(conn)` on a thread of its own per connection."""

    def __init__(self, handle: Callable[[socket.socket], None], path: str = "") -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.connections = 0
        self._handle = handle
        self._path = path
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}{self._path}"

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
