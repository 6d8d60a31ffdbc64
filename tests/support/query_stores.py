"""Prometheus-compatible query APIs other than Prometheus, as `top` meets them in front of a central store:
a real VictoriaMetrics single node under a path prefix, and a tenant gateway that answers only queries
carrying `X-Scope-OrgID`, as Mimir's and Cortex's do ("no org id", HTTP 401), forwarding the rest unchanged."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from support.prometheus_server import DEADLINE_SECONDS, free_port
from support.waiting import wait_until


class VictoriaMetrics:
    """`victoria-metrics` scraping `scrape_configs` every second, its API under `prefix` (e.g. /prometheus)."""

    def __init__(self, scrape_configs: list, prefix: str = "/prometheus"):
        binary = shutil.which("victoria-metrics")
        if binary is None:
            pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics)")
        self.folder = Path(tempfile.mkdtemp(prefix="top-vm-", dir="/tmp"))
        (self.folder / "scrape.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"},
                                                                "scrape_configs": scrape_configs}))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}{prefix}"
        # Without -search.latencyOffset, samples younger than 30 s stay out of every answer.
        self.proc = subprocess.Popen([binary, f"-httpListenAddr=127.0.0.1:{port}", f"-http.pathPrefix={prefix}",
                                      f"-storageDataPath={self.folder / 'data'}",
                                      f"-promscrape.config={self.folder / 'scrape.yml'}",
                                      "-search.latencyOffset=1s", "-loggerLevel=ERROR"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._healthy, DEADLINE_SECONDS, 0.2, "victoria-metrics to answer /health")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class TenantGateway:
    """Forwards GETs to `upstream` (same path and query) when `X-Scope-OrgID` is `tenant`; otherwise 401
    "no org id" as Mimir answers; `asked` keeps the tenant header of every request."""

    def __init__(self, upstream: str, tenant: str):
        self.asked = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                org = self.headers.get("X-Scope-OrgID")
                gateway.asked.append(org)
                if org != tenant:
                    return self._send(401, b"no org id\n", "text/plain")
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=10) as answer:
                        self._send(answer.status, answer.read(), answer.headers.get("Content-Type", ""))
                except urllib.error.HTTPError as exc:
                    self._send(exc.code, exc.read(), exc.headers.get("Content-Type", ""))

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
