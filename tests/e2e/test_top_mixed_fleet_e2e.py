"""A mixed fleet: the NVIDIA demo and an AMD node (tests/data/amd/mi300x-node.prom, served by a real HTTP server)
scraped by a real Prometheus with every rule file, and `top` through Prometheus and through the pod proxy."""

from __future__ import annotations

import shutil
from http import HTTPStatus
from pathlib import Path

import pytest

from support.demo_process import start_demo
from support.exporter_process import REPO_ROOT
from support.fake_pod_proxy import PodProxyApi
from support.loopback_http import LoopbackHttpServer, QuietHandler
from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer
from support.top_runs import add_exporter_pod, kubeconfig_for, run_top, top_json
from support.waiting import wait_until

AMD_NODE_TEXT = Path(__file__).resolve().parents[1] / "data" / "amd" / "mi300x-node.prom"
RULE_FILES = sorted(str(path) for path in (REPO_ROOT / "prometheus" / "rules").glob("*.rules.yml"))
MIB = 1 << 20
# What the AMD node's text says, worked out by hand: (namespace, pod, container) → UTIL, memory, power, GPUs.
# trainer-amd holds GPUs 0 and 1 in one container and GPU 2 in another: UTIL (0.8 + 0.4 + 0.6) / 3 for both.
# The partition holders have no UTIL and no power: their GPU's activity and power are the whole GPU's.
AMD_ROWS = {
    ("amd-ml", "trainer-amd", "pytorch"): (0.6, 180000 * MIB, 920.0, 2),
    ("amd-ml", "trainer-amd", "loader"): (0.6, 30000 * MIB, 460.0, 1),
    ("amd-ml", "idle-amd", "jupyter"): (0.0, 300 * MIB, 140.0, 1),
    ("amd-batch", "embed-a", "worker"): (None, 9000 * MIB, None, 0.125),
    ("amd-batch", "embed-b", "worker"): (None, 7000 * MIB, None, 0.125),
}
NVIDIA_PODS = {"trainer-0", "llm-server-a", "llm-server-b"}


class _AmdNode(QuietHandler):
    """An AMD node's exporter: the same text on every GET, as a scrape reads it."""

    def do_GET(self) -> None:
        body = AMD_NODE_TEXT.read_bytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def fleet():
    demo, amd = start_demo(), LoopbackHttpServer(_AmdNode)
    yield demo, amd
    amd.stop()
    demo.stop()


@pytest.fixture(scope="module")
def prometheus(fleet, tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    demo, amd = fleet
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": RULE_FILES,
              "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                  "static_configs": [
                                      {"targets": [demo.address], "labels": {"node": "demo-node"}},
                                      {"targets": [amd.url[len("http://"):]], "labels": {"node": "amd-node"}}]}]}
    server = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), config)
    try:
        # Each rule group evaluates on its own: wait for both vendors in the two records read below.
        wait_until(lambda: all(len({r["metric"]["vendor"] for r in server.query(record)}) == 2 for record in (
            "namespace_pod:pod_gpu_utilization:ratio", "namespace:pod_gpu_allocated_gpus:sum")),
                   2 * DEADLINE_SECONDS, 0.5, "both vendors' pods in the utilisation and allocation rules")
        yield server
    finally:
        server.stop()


def _check_amd_rows(rows):
    for key, (utilization, memory, power, gpus) in AMD_ROWS.items():
        row = rows[key]
        assert row["vendor"] == "amd", row
        assert row["utilization"] == pytest.approx(utilization) if utilization is not None else \
            row["utilization"] is None, row
        assert (row["memory_bytes"], row["gpus"]) == (memory, gpus), row
        assert row["power_watts"] == power, row
    assert {row["vendor"] for key, row in rows.items() if key[1] in NVIDIA_PODS} == {"nvidia"}


def _rows(document):
    return {(row["namespace"], row["pod"], row["container"]): row for row in document["rows"]}


def test_the_rule_gives_each_pod_of_both_vendors_its_value_and_vendor(prometheus):
    found = {(r["metric"]["namespace"], r["metric"]["pod"]): (r["metric"]["vendor"], float(r["value"][1]))
             for r in prometheus.query("namespace_pod:pod_gpu_utilization:ratio")}
    assert found[("amd-ml", "trainer-amd")] == ("amd", pytest.approx(0.6))
    assert found[("amd-ml", "idle-amd")] == ("amd", 0.0)
    assert ("amd-batch", "embed-a") not in found and ("amd-batch", "embed-b") not in found  # partition holders
    assert {pod for (_, pod), (vendor, _) in found.items() if vendor == "nvidia"} == NVIDIA_PODS
    assert found[("inference", "llm-server-b")] == ("nvidia", 0.0)
    # GPU counts of both vendors may be added: the namespaces' allocated GPUs, AMD partitions as 1/8.
    allocated = {(r["metric"]["namespace"], r["metric"]["vendor"]): float(r["value"][1])
                 for r in prometheus.query("namespace:pod_gpu_allocated_gpus:sum")}
    assert allocated[("amd-ml", "amd")] == 4 and allocated[("amd-batch", "amd")] == 0.25


def test_top_through_prometheus_shows_every_pod_of_both_vendors(prometheus):
    document = top_json(["--prometheus", prometheus.url, "--window", "20s"])
    rows = _rows(document)
    _check_amd_rows(rows)
    # UTIL is the rule's number, for AMD's pods as for NVIDIA's.
    rule = {(r["metric"]["namespace"], r["metric"]["pod"]): float(r["value"][1])
            for r in prometheus.query("namespace_pod:pod_gpu_utilization:ratio{vendor=\"amd\"}")}
    for (namespace, pod, _), row in rows.items():
        if row["vendor"] == "amd" and row["utilization"] is not None:
            assert row["utilization"] == pytest.approx(rule[(namespace, pod)])
    text = run_top(["--prometheus", prometheus.url, "--window", "20s"])
    assert text.returncode == 0, text.stderr
    header, *lines = text.stdout.splitlines()
    assert header.split()[:5] == ["NAMESPACE", "POD", "CONTAINER", "NODE", "VENDOR"]
    embed = next(line.split() for line in lines if "embed-a" in line)
    assert embed[4] == "amd"
    # Grouped, a vendor's GPUs are never averaged with another's: one row per namespace and vendor.
    by_namespace = top_json(["--prometheus", prometheus.url, "--window", "20s", "--by", "namespace"])
    assert {(row["namespace"], row["vendor"]) for row in by_namespace["rows"]} >= {("amd-ml", "amd"),
                                                                                  ("amd-batch", "amd")}


def test_top_through_the_pod_proxy_reads_the_amd_node_alike(fleet, tmp_path):
    demo, amd = fleet
    api = PodProxyApi().start()
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-nv001", "demo-node", demo.address)
        add_exporter_pod(api, "pod-gpu-metrics-exporter-amd01", "amd-node", amd.url[len("http://"):])
        document = top_json(["--kubeconfig", kubeconfig_for(api, tmp_path), "--window", "2s"])
    finally:
        api.stop()
    rows = _rows(document)
    _check_amd_rows(rows)
    assert {row["node"] for row in rows.values() if row["vendor"] == "amd"} == {"amd-node"}
