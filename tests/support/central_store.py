"""A real central store for many clusters (Debian's victoria-metrics package): the store, one vmagent per
cluster that scrapes it and remote-writes with its own `cluster` label, and vmalert evaluating rule files there.

Each process (support.victoria_metrics) listens on a free loopback port and keeps its data in the test's folder.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import List

import yaml

from support.deploy_tools import require_executable
from support.loopback_http import LoopbackHttpServer, QuietHandler
from support.victoria_metrics import INSTALL, VmProcess


def start_store(folder: Path) -> VmProcess:
    """Single-node victoria-metrics: remote write at /api/v1/write, the Prometheus query API at /api/v1/.
    It hides samples younger than -search.latencyOffset (30 s by default): 1 s lets a test see them."""
    binary = require_executable("victoria-metrics", INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    return VmProcess(binary, folder, [f"-storageDataPath={folder / 'data'}", "-retentionPeriod=1d",
                                      "-search.latencyOffset=1s", "-search.disableCache"])


def start_agent(folder: Path, label: str, targets: List[str], store: VmProcess, relabel: str = "") -> VmProcess:
    """vmagent scraping `targets` every second as the shipped scrape job does (honor_labels, /gpu/metrics)
    and remote-writing to `store` with `label` ("cluster=east") on every series, as an agent-mode Prometheus
    with external_labels would; `relabel`: rules (YAML) it applies to each series after adding that label."""
    binary = require_executable("vmagent", INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"global": {"scrape_interval": "1s"},
              "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                  "static_configs": [{"targets": targets}]}]}
    (folder / "scrape.yml").write_text(yaml.safe_dump(config))
    flags = [f"-promscrape.config={folder / 'scrape.yml'}", f"-remoteWrite.url={store.url}/api/v1/write",
             f"-remoteWrite.label={label}", "-remoteWrite.flushInterval=1s", f"-remoteWrite.tmpDataPath={folder / 'queue'}"]
    if relabel:
        (folder / "relabel.yml").write_text(relabel)
        flags.append(f"-remoteWrite.relabelConfig={folder / 'relabel.yml'}")
    return VmProcess(binary, folder, flags)


class AlertReceiver(LoopbackHttpServer):
    """What Alertmanager's v2 API takes (POST /api/v2/alerts, a JSON list of alerts), kept for the test to read."""

    def __init__(self):
        self.alerts: List[dict] = []
        received = self.alerts

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.extend(json.loads(body or b"[]"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        super().__init__(Handler)


def start_rules(folder: Path, rule_files: List[Path], store: VmProcess, notifier: str) -> VmProcess:
    """vmalert evaluating `rule_files` every second against `store`, writing what they record back to it and
    sending alerts to the Alertmanager API at `notifier` (it refuses alerting rules without one)."""
    binary = require_executable("vmalert", INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    return VmProcess(binary, folder, [*(f"-rule={path}" for path in rule_files), "-evaluationInterval=1s",
                                      f"-datasource.url={store.url}", f"-remoteWrite.url={store.url}",
                                      "-remoteWrite.flushInterval=1s",
                                      f"-notifier.url={notifier}"])


def query(store: VmProcess, promql: str) -> list:
    """The instant query's result vector; a refused query raises with the store's words."""
    url = store.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.load(answer)
    if body.get("status") != "success":
        raise AssertionError(f"{promql}: {body}")
    return body["data"]["result"]
