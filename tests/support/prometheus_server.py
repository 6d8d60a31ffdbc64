"""A real Prometheus server process on a free loopback port, and its query API."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional, Tuple, Union

import yaml

from support.child_processes import stop_process
from support.waiting import wait_until

# How long a query may take to show what a test waits for (scrapes and rule evaluations to
# come round), and how often to ask: wait_until(query, DEADLINE_SECONDS, POLL_SECONDS, what).
DEADLINE_SECONDS = 40.0
POLL_SECONDS = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class PrometheusServer:
    """A prometheus server process on a free loopback port, with its own TSDB folder."""

    def __init__(self, binary: str, folder: Path, config: Union[dict, Path], web_config: Optional[dict] = None,
                 credentials: Optional[Tuple[str, str]] = None):
        """`config`: its configuration, or the file that holds it (where the file's own folder matters: Prometheus
        reads relative rule_files from there); `web_config`: its --web.config.file (basic auth users, TLS);
        `credentials`: (user, password) to ask it with, when its web config requires them."""
        if isinstance(config, Path):
            config_file = config
        else:
            config_file = folder / "prometheus.yml"
            config_file.write_text(yaml.safe_dump(config))
        extra = []
        if web_config is not None:
            (folder / "web.yml").write_text(yaml.safe_dump(web_config))
            extra.append(f"--web.config.file={folder / 'web.yml'}")
        self._headers = {}
        if credentials:
            self._headers["Authorization"] = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
        for _attempt in range(3):  # the free port can be taken between probing and binding
            self.url = f"http://127.0.0.1:{free_port()}"
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config_file}", f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address={self.url[len('http://'):]}", "--log.level=warn"] + extra,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if self._wait_ready():
                return
        raise RuntimeError(f"prometheus did not become ready: {self.proc.stderr.read()}")

    def _wait_ready(self) -> bool:
        try:
            state = wait_until(self._readiness, DEADLINE_SECONDS, 0.2, "prometheus to answer /-/ready or exit")
        except AssertionError:
            state = "late"
        if state == "ready":
            return True
        self.stop()
        return False

    def _readiness(self) -> str:
        """"ready", "exited" (the port was taken after all), or "" while it starts."""
        if self.proc.poll() is not None:
            return "exited"
        try:
            request = urllib.request.Request(self.url + "/-/ready", headers=self._headers)
            with urllib.request.urlopen(request, timeout=2) as response:
                return "ready" if response.status == 200 else ""
        except OSError:
            return ""

    def query(self, promql: str) -> list:
        answer = get_json(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        stop_process(self.proc)
