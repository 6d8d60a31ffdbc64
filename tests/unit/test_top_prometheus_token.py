"""`--prometheus.bearer-token-file`: the token goes in the Authorization header, as Prometheus's own clients send it.

Prometheus itself checks only basic auth (tests/e2e/test_top_prometheus_e2e.py); the proxies in front
of it that check tokens are stood for by an HTTP server answering the query API's JSON.
"""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from exporter.top.command import run_top

TOKEN = "eyJhbGciOi.fake.token"


class _TokenCheckingApi(BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self.seen.append(self.headers.get("Authorization"))
        ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body) if ok else 0))
        self.end_headers()
        if ok:
            self.wfile.write(body)


@pytest.fixture
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenCheckingApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("how", ["file", "environment"])
def test_the_bearer_token_is_sent(api, tmp_path, how):
    (tmp_path / "token").write_text(TOKEN + "\n")
    args = ["--prometheus", api] + (["--prometheus.bearer-token-file", str(tmp_path / "token")] if how == "file" else [])
    environ = {"POD_GPU_EXPORTER_PROMETHEUS_BEARER_TOKEN": TOKEN} if how == "environment" else {}
    err = io.StringIO()
    assert run_top(args, environ=environ, out=io.StringIO(), err=err) == 1
    assert "has no pod_gpu_exporter_dcgm_up series" in err.getvalue()  # answered: the token was taken


def test_without_it_the_refusal_is_one_line(api):
    err = io.StringIO()
    assert run_top(["--prometheus", api], environ={}, out=io.StringIO(), err=err) == 1
    assert err.getvalue().count("\n") == 1 and "answered HTTP 401" in err.getvalue()
