"""`demo --gpu.vendor amd` as a user starts it: the simulated MI300X node (a real gRPC kubelet and AMD identity service
on unix sockets, AMD's exporter over HTTP, a sysfs tree) served by the real exporter process. Its /gpu/metrics, its
node page, the `mapping` command it prints, and a GPU turning unhealthy; `top` through a real Prometheus is in
test_amd_demo_prometheus_e2e.py."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from typing import Dict, Set, Tuple

import pytest
import requests

from exporter.vendors.amd.demo_node import (CPX_GPU, HOLDERS, NIC_RESOURCE, UNHEALTHY_AFTER_SECONDS,
                                            UNHEALTHY_GPU_ID, demo_gpus)
from support.exporter_process import REPO_ROOT, exporter_env
from support.top_runs import start_demo_keeping_its_text
from support.waiting import wait_until

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$")
_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
ALL_GPU_IDS = {gpu.gpu_id for gpu in demo_gpus()}
IDLE_GPU_IDS = ALL_GPU_IDS - set(HOLDERS)
CPX_IDS = {gpu.gpu_id for gpu in demo_gpus() if gpu.spec.index == CPX_GPU}


@pytest.fixture(scope="module")
def demo():
    started = time.monotonic()
    process, printed = start_demo_keeping_its_text("--gpu.vendor", "amd")
    yield process, printed, started
    process.stop()


def _samples(text: str):
    """(name, labels, value) of every sample line."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            yield match.group(1), dict(_PAIR.findall(match.group(2))), float(match.group(3))


def _holder(labels: Dict[str, str]) -> Tuple[str, str, str]:
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")


def _attributed(text: str) -> str:
    """A scrape once the first mapping and the identity service's answer are in: every holder's partition named."""
    return text if 'gpu_id="12"' in text and 'pod="notebook-31aa"' in text else ""


def test_its_amd_exporter_answers_as_promhttp_does(demo):
    """Chunked, and compressed for a client that asks for gzip, as AMD's exporter (client_golang's promhttp) answers:
    the exporter reads the demo's AMD exporter as it reads a real node's (the chunks' sizes: test_demo_upstream)."""
    _, printed, _ = demo
    url = wait_until(lambda: next((match[1] for line in list(printed)
                                   for match in [re.search(r"AMD's device-metrics-exporter at (\S+),", line)] if match),
                                  None), 10, 0.1, "the AMD exporter's URL in the banner")
    plain = requests.get(url, headers={"Accept-Encoding": "identity"}, timeout=10)
    assert plain.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in plain.headers
    assert "gpu_gfx_activity{" in plain.text
    compressed = requests.get(url, headers={"Accept-Encoding": "gzip"}, timeout=10)
    assert compressed.headers.get("Content-Encoding") == "gzip" and "gpu_gfx_activity{" in compressed.text


def test_gpu_metrics_name_every_amd_holder_and_no_one_else(demo):
    process, _, _ = demo
    text = wait_until(lambda: _attributed(requests.get(process.url(), timeout=10).text), 20, 0.2, "attributed")
    samples = list(_samples(text))
    # A family every GPU and partition has of its own: each one's samples name exactly its holder, idle ones nobody.
    vram = {labels["gpu_id"]: _holder(labels) for name, labels, _ in samples if name == "gpu_used_vram"}
    assert set(vram) == ALL_GPU_IDS
    assert {gpu_id: holder for gpu_id, holder in vram.items() if holder != ("", "", "")} == HOLDERS
    assert 'pod="llm-server-old-5d8f"' not in text  # AMD's exporter's stale holder on GPU 2, replaced by ours
    # The CPX GPU's device-wide activity (on its partition 0) belongs to none of its partitions' holders.
    activity = {labels["gpu_id"]: _holder(labels) for name, labels, _ in samples if name == "gpu_gfx_activity"}
    assert activity[min(CPX_IDS, key=int)] == ("", "", "") and activity["0"] == HOLDERS["0"]
    rows = {(labels["gpu_id"], labels["pod"], labels["resource"]) for name, labels, _ in samples
            if name == "pod_gpu_allocation_info"}
    assert {(gpu_id, pod) for gpu_id, pod, _ in rows} == {(gpu_id, h[1]) for gpu_id, h in HOLDERS.items()}
    assert {resource for *_, resource in rows} == {"amd.com/spx_nps1", "amd.com/cpx_nps1"}  # the NIC is no GPU
    assert NIC_RESOURCE not in text
    assert 'pod_gpu_exporter_vendor_info{vendor="amd"} 1' in text and "pod_gpu_exporter_amd_identity_up 1" in text


def _activity_of_gpu_0(process) -> float:
    return next(value for name, labels, value in _samples(requests.get(process.url(), timeout=10).text)
                if name == "gpu_gfx_activity" and labels["gpu_id"] == "0")


def test_values_move(demo):
    process, _, _ = demo
    first = _activity_of_gpu_0(process)
    wait_until(lambda: _activity_of_gpu_0(process) != first, 20, 0.5, "GPU 0's activity moving")


def test_the_node_page_shows_amd_gpus_partitions_and_holders(demo):
    process, _, _ = demo
    wait_until(lambda: _attributed(requests.get(process.url(), timeout=10).text), 20, 0.2, "attributed")
    page = requests.get(process.url("/"), timeout=10).text
    assert "GPUs of demo-node" in page and "AMD Instinct MI300X OAM" in page
    for namespace, pod, container in HOLDERS.values():
        assert f"{namespace}/" in page and pod in page and container in page
    for gpu in demo_gpus():  # every GPU and every partition of the CPX GPU, by its own UUID
        assert gpu.uuid in page
    held_by_nobody = page[page.index("Held by nobody"):]
    assert {f"GPU {gpu_id}" for gpu_id in IDLE_GPU_IDS} <= set(re.findall(r"GPU \d+", held_by_nobody))


def test_the_mapping_command_it_prints_names_each_devices_gpu(demo):
    process, printed, _ = demo
    command = wait_until(lambda: next((line.strip() for line in list(printed) if " mapping --kubelet.socket " in line),
                                      None), 10, 0.1, "the printed mapping command")
    result = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT),
                            env=exporter_env())
    assert result.returncode == 0, result.stderr
    named: Set[Tuple[str, str]] = set()
    for line in result.stdout.splitlines()[1:]:
        cells = line.split()
        match = re.search(r'gpu(?:_id)?="(\d+)"', line)
        named.add((cells[1], match.group(1) if match else "unresolved"))
    assert named == {(holder[1], gpu_id) for gpu_id, holder in HOLDERS.items()}


def test_a_gpu_turns_unhealthy_for_its_holder(demo):
    process, _, started = demo

    def health() -> Dict[str, str]:
        text = requests.get(process.url(), timeout=10).text
        return {labels["gpu_id"]: labels["status"] for name, labels, value in _samples(text)
                if name == "pod_gpu_device_health_status" and value == 1}

    assert health()[UNHEALTHY_GPU_ID] == "healthy" or time.monotonic() - started > UNHEALTHY_AFTER_SECONDS
    wait_until(lambda: health().get(UNHEALTHY_GPU_ID) == "unhealthy", UNHEALTHY_AFTER_SECONDS + 30, 1.0,
               f"gpu_id {UNHEALTHY_GPU_ID} unhealthy")
    text = requests.get(process.url(), timeout=10).text
    (holder,) = {_holder(labels) for name, labels, value in _samples(text)
                 if name == "gpu_health" and labels["gpu_id"] == UNHEALTHY_GPU_ID and value == 0}
    assert holder == HOLDERS[UNHEALTHY_GPU_ID]
    assert {gpu_id for gpu_id, status in health().items() if status == "unhealthy"} == {UNHEALTHY_GPU_ID}
