"""A small real HTTP server for a test's stand-in of an outside service (an Alertmanager receiver, a tenant
gateway): a ThreadingHTTPServer on a free loopback port, answering from a daemon thread until stop()."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Type


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps http.server's one line per request off the test's output."""

    def log_message(self, format: str, *args) -> None:
        pass


class LoopbackHttpServer:
    """`handler` serving on 127.0.0.1 at a port the system chose, reached at `url`."""

    def __init__(self, handler: Type[BaseHTTPRequestHandler]):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
