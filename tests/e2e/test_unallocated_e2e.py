"""Who uses a GPU not theirs, against the real exporter process: a pod holding no GPU, and a holder's own
sidecar, running processes on another pod's GPU (fake NVML in C, /proc as a folder tree, the fake API)."""

from __future__ import annotations

import uuid

from exporter.sources.kubelet import AllocatedDevice
from support.fake_kube_api import make_pod
from support.scrape_checks import assert_parses, scrape
from support.share_invariants import check_unallocated_breakdown, parse_samples
from support.shared_node import L4, MIB, NODE, holder_labels, series, shares_served
from support.waiting import wait_until

UNALLOCATED_MEMORY = "pod_gpu_unallocated_memory_used_bytes"
UNALLOCATED_SM = "pod_gpu_unallocated_sm_utilization_ratio"


def test_a_pod_holding_no_gpu_is_named_on_the_gpu_it_uses_and_the_breakdown_adds_up(gpu_node):
    gpu_node.add_pod("trainer", containers=("main", "sidecar"))
    gpu_node.add_pod("intruder", namespace="other")  # privileged, or NVIDIA_VISIBLE_DEVICES=all: no GPU allocated
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4)
    for pid, used, sm in ((101, 4000 * MIB, 50), (201, 900 * MIB, 20), (202, 100 * MIB, 10), (301, 3 * MIB, 5)):
        gpu_node.nvml.process(L4, pid, used).sample(L4, pid, sm)
    gpu_node.nvml.write()
    gpu_node.run_in(101, "trainer")
    gpu_node.run_in(201, "intruder")
    gpu_node.run_in(202, "intruder")
    gpu_node.run_in(301, "trainer", container="sidecar")  # the pod holds the GPU, this container does not
    exporter = gpu_node.start()
    text = shares_served(exporter, UNALLOCATED_MEMORY, count=2)
    intruder = holder_labels("intruder", namespace="other")
    sidecar = holder_labels("trainer", container="sidecar")
    assert series(text, UNALLOCATED_MEMORY) == {intruder: str(1000 * MIB), sidecar: str(3 * MIB)}
    assert series(text, UNALLOCATED_SM) == {intruder: "0.3", sidecar: "0.05"}
    assert series(text, "pod_gpu_container_memory_used_bytes") == {holder_labels("trainer"): str(4000 * MIB)}
    device = f'UUID="{L4}",gpu="0"'
    assert series(text, "pod_gpu_unattributed_memory_used_bytes")[device + ',reason="not_holder"'] == str(1003 * MIB)
    check_unallocated_breakdown(parse_samples(text), named_exactly=True)
    assert_parses(text)


def test_a_pod_the_api_does_not_know_stays_in_not_holder_and_is_named_once_it_appears(gpu_node):
    gpu_node.add_pod("trainer")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 101, 64 * MIB).process(L4, 401, 32 * MIB).sample(L4, 401, 40).write()
    gpu_node.run_in(101, "trainer")
    late_uid, late_container = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    gpu_node.proc.container_process(401, late_uid, late_container)  # e.g. a static pod, or one the watch has not seen
    exporter = gpu_node.start()
    text = shares_served(exporter)
    device = f'UUID="{L4}",gpu="0"'
    assert series(text, "pod_gpu_unattributed_memory_used_bytes")[device + ',reason="not_holder"'] == str(32 * MIB)
    assert UNALLOCATED_MEMORY not in text  # no name to give: the breakdown leaves it out
    check_unallocated_breakdown(parse_samples(text))
    pod = make_pod("batch", "late", NODE, uid=late_uid)
    pod["status"]["containerStatuses"][0]["containerID"] = "containerd://" + late_container
    gpu_node.api.put("v1", "pods", pod)
    text = shares_served(exporter, UNALLOCATED_MEMORY)
    assert series(text, UNALLOCATED_MEMORY) == {holder_labels("late", namespace="batch"): str(32 * MIB)}
    assert series(text, UNALLOCATED_SM) == {holder_labels("late", namespace="batch"): "0.4"}
    check_unallocated_breakdown(parse_samples(text), named_exactly=True)


def test_device_mode_serves_no_breakdown(gpu_node):
    gpu_node.add_pod("trainer")
    gpu_node.add_pod("intruder")
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 201, MIB).write()
    gpu_node.run_in(201, "intruder")
    process_mode, device_mode = gpu_node.start(), gpu_node.start(mode="device")
    shares_served(process_mode, UNALLOCATED_MEMORY)
    wait_until(lambda: "pod_gpu_exporter_dcgm_up 1" in scrape(device_mode).text)
    assert "pod_gpu_unallocated_" not in scrape(device_mode).text
