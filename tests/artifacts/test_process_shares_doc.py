"""docs/process-shares.md stays true: it documents every series of the mode, its PromQL passes promtool,
and a real Prometheus scraping the real exporter answers its per-namespace queries."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
import yaml

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import missing_tool, require_executable
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS, PrometheusServer
from support.shared_node import A800_FIXTURE, A800_GPU0, L4, MIB, SHARE_FAMILIES, shares_served
from support.waiting import wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "process-shares.md"
# The PromQL that splits device-level values between a shared GPU's holders, without process mode.
ATTRIBUTION = DOC.parent / "attribution.md"


def doc_queries(path: Path = DOC) -> List[str]:
    """The PromQL expressions of a page's promql blocks, one per comment-headed paragraph."""
    blocks = re.findall(r"```promql\n(.*?)```", path.read_text(), re.DOTALL)
    queries = []
    for paragraph in "\n\n".join(blocks).split("\n\n"):
        expression = "\n".join(line for line in paragraph.splitlines() if not line.startswith("#")).strip()
        if expression:
            queries.append(expression)
    return queries


def test_every_series_of_the_mode_is_documented(gpu_node):
    gpu_node.add_pod("a")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).energy(L4, 5000).process(L4, 10, MIB).sample(L4, 10, 5).write()
    gpu_node.run_in(10, "a")
    text = shares_served(gpu_node.start())
    served = set(re.findall(r"^# TYPE (pod_gpu_\w+) ", text, re.MULTILINE))
    documented = DOC.read_text()
    assert set(SHARE_FAMILIES) <= served
    assert not sorted(name for name in SHARE_FAMILIES if f"`{name}`" not in documented)


@pytest.mark.parametrize("page", [DOC, ATTRIBUTION], ids=["process-shares.md", "attribution.md"])
def test_the_docs_queries_pass_promtool(tmp_path, page):
    queries = doc_queries(page)
    assert len(queries) >= 4
    if page == DOC:
        assert "sum by (namespace)" in queries[0]
        assert any("pod_gpu_container_energy_joules_total" in query for query in queries)
    else:
        assert all("pod_gpu_allocation_info" in query for query in queries)
    promtool = shutil.which("promtool")
    if promtool is None:
        missing_tool("promtool", "apt-get install prometheus (.ci/run does)")
    rules = {"groups": [{"name": "doc", "rules": [{"record": f"doc:query{n}", "expr": q} for n, q in enumerate(queries)]}]}
    path = tmp_path / "doc-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_real_prometheus_answers_the_docs_namespace_queries(gpu_node, tmp_path):
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/run does)")
    whole, shared = "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6", "GPU-5022ce43-b44a-987b-71c3-dee05378a618"  # A800 GPUs 1, 2
    for name, namespace in (("solo", "team-a"), ("left", "team-a"), ("right", "team-b")):
        gpu_node.add_pod(name, namespace=namespace)
    gpu_node.kubelet.set_devices([AllocatedDevice("team-a", "solo", "main", "nvidia.com/gpu", whole),
                              AllocatedDevice("team-a", "left", "main", "nvidia.com/gpu", f"{shared}::0"),
                              AllocatedDevice("team-b", "right", "main", "nvidia.com/gpu", f"{shared}::1")])
    gpu_node.nvml.gpu(0, A800_GPU0).gpu(1, whole).gpu(2, shared)  # NVML indices are contiguous
    gpu_node.nvml.process(whole, 10, 5000 * MIB).process(shared, 20, 1000 * MIB).process(shared, 30, 3000 * MIB).write()
    for pid, pod in ((10, "solo"), (20, "left"), (30, "right")):
        gpu_node.run_in(pid, pod)
    exporter = gpu_node.start(A800_FIXTURE)
    shares_served(exporter, count=3)
    prometheus = PrometheusServer(binary, tmp_path, {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "gpu", "metrics_path": "/gpu/metrics", "honor_labels": True,
                            "static_configs": [{"targets": [exporter.address]}]}]})
    try:
        shared_only, everything = doc_queries()[:2]

        def by_namespace(query):
            result = prometheus.query(query)
            return {s["metric"]["namespace"]: float(s["value"][1]) for s in result} if len(result) == 2 else None

        assert wait_until(lambda: by_namespace(shared_only), DEADLINE_SECONDS, POLL_SECONDS, "memory per namespace on shared GPUs") == {
            "team-a": 1000 * MIB, "team-b": 3000 * MIB}  # the whole GPU held by team-a's solo pod is left out
        assert by_namespace(everything) == {"team-a": 6000 * MIB, "team-b": 3000 * MIB}
    finally:
        prometheus.stop()
