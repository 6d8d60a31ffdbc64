"""AMD's device-metrics-exporter stand-in: a real HTTP server on loopback answering /metrics with the simulated node's text."""

from __future__ import annotations

from typing import Callable

from support.loopback_http import LoopbackHttpServer, QuietHandler

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what its Go client (promhttp) answers with


class FakeAmdExporter:
    """Serves `body()` at /metrics on every request (its value at that moment); `requests` counts them."""

    def __init__(self, body: Callable[[], bytes]):
        self.body = body
        self.requests = 0
        owner = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.requests += 1
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                payload = owner.body()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = LoopbackHttpServer(Handler)
        self.url = self._server.url + "/metrics"

    def stop(self) -> None:
        self._server.stop()
