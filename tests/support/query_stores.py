"""Prometheus-compatible query APIs other than Prometheus, as `top` meets them in front of a central store:
a real VictoriaMetrics single node under a path prefix, and a tenant gateway that answers only queries
carrying `X-Scope-OrgID`, as Mimir's and Cortex's do ("no org id", HTTP 401), forwarding the rest unchanged."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from support.deploy_tools import require_executable
from support.loopback_http import LoopbackHttpServer, QuietHandler
from support.victoria_metrics import INSTALL, VmProcess


class VictoriaMetrics(VmProcess):
    """`victoria-metrics` scraping `scrape_configs` every second, its API under `prefix` (e.g. /prometheus)."""

    def __init__(self, scrape_configs: list, prefix: str = "/prometheus"):
        binary = require_executable("victoria-metrics", INSTALL)
        self.folder = Path(tempfile.mkdtemp(prefix="top-vm-", dir="/tmp"))
        (self.folder / "scrape.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"},
                                                                "scrape_configs": scrape_configs}))
        # Without -search.latencyOffset, samples younger than 30 s stay out of every answer.
        super().__init__(binary, self.folder, [f"-storageDataPath={self.folder / 'data'}",
                                               f"-promscrape.config={self.folder / 'scrape.yml'}",
                                               "-search.latencyOffset=1s"], prefix=prefix)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class TenantGateway(LoopbackHttpServer):
    """Forwards GETs to `upstream` (same path and query) when `X-Scope-OrgID` is `tenant`; otherwise 401
    "no org id" as Mimir answers; `asked` keeps the tenant header of every request."""

    def __init__(self, upstream: str, tenant: str):
        self.asked = []
        gateway = self

        class Handler(QuietHandler):
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

        super().__init__(Handler)
