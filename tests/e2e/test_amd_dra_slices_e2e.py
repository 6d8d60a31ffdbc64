"""AMD's DRA devices met through their ResourceSlice when the Kubernetes API is read: a whole GPU by its `pciAddr`,
sysfs or not; a partition, whose slice names only its GPU (`parentPciAddr`), through sysfs alone, never taken for
its GPU; a slice that disagrees with sysfs attributes nothing. Each counts as its share of its GPU."""

from __future__ import annotations

import requests

from exporter.vendors.amd.demo_node import CPX_GPU
from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node
from support.amd_node import AmdNode, amd_slice, hold_through_claim, holder, samples
from support.fake_kube_api import write_kubeconfig
from support.kube_e2e import gauge
from support.kube_scenario import NODE
from support.waiting import wait_until

SPECS = mi300x_node(cpx_gpus=(CPX_GPU,))
WHOLE, OTHER, CPX = SPECS[2], SPECS[3], SPECS[CPX_GPU]  # gpu_id 2, gpu_id 3, the CPX GPU (gpu_id 7-14)


def _name(spec: GpuSpec, partition: int = 0) -> str:
    return f"gpu-{spec.card + partition}-{spec.render + partition}"


def _served(amd: AmdNode, api, tmp_path, slice_devices: dict, holders: dict, ready_pod: str) -> str:
    """The answer once `ready_pod` holds a GPU sample: the slice published, each pod holding its device."""
    api.put("resource.k8s.io/v1", "resourceslices", amd_slice(slice_devices))
    amd.hold([hold_through_claim(api, pod, device) for pod, device in holders.items()])
    amd.serve(kubeconfig=write_kubeconfig(str(tmp_path / "kubeconfig"), api.url), node_name=NODE)

    def ready() -> str:
        response = requests.get(amd.exporter.url(), timeout=10)
        text = response.text
        return text if any(name.startswith("gpu_") and labels.get("pod") == ready_pod
                           for name, labels, _ in samples(text)) else ""
    return wait_until(ready, 15)


def _holders_by_gpu(text: str) -> dict:
    """gpu_id → the holders named on its AMD samples (pod names)."""
    found: dict = {}
    for name, labels, _ in samples(text):
        if "gpu_id" in labels and not name.startswith("pod_gpu_") and holder(labels):
            found.setdefault(labels["gpu_id"], set()).add(labels["pod"])
    return found


def _allocated(text: str) -> dict:
    return {labels["pod"]: float(value) for name, labels, value in samples(text)
            if name == "pod_gpu_container_allocated_gpus"}


def test_without_sysfs_a_whole_gpu_is_met_by_its_slice_address_and_a_partition_stays_unresolved(amd_node, api,
                                                                                                  tmp_path):
    amd = amd_node(specs=[])  # the node's sysfs not mounted: no GPU, partition or KFD node to read
    text = _served(amd, api, tmp_path, {
        _name(WHOLE): {"pciAddr": WHOLE.address.upper(), "type": "amdgpu"},
        _name(CPX, 0): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
        _name(CPX, 3): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
    }, {"whole": _name(WHOLE), "part-0": _name(CPX, 0), "part-3": _name(CPX, 3)}, "whole")
    # The whole GPU's samples are its holder's; no partition is guessed to be its GPU (whose address is the first
    # partition's): the CPX GPU's samples go to nobody.
    assert _holders_by_gpu(text) == {"2": {"whole"}}
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "2"
    rows = {labels["pod"]: labels.get("gpu_id") for name, labels, _ in samples(text)
            if name == "pod_gpu_allocation_info"}
    assert rows == {"whole": "2", "part-0": None, "part-3": None}
    # A whole GPU counts 1; a partition's share is unknown without sysfs, so it is not counted at all.
    assert _allocated(text) == {"whole": 1.0}


def test_with_sysfs_each_device_is_checked_and_counted_as_its_share(amd_node, api, tmp_path):
    amd = amd_node()
    text = _served(amd, api, tmp_path, {
        _name(WHOLE): {"pciAddr": WHOLE.address, "type": "amdgpu"},
        # Its slice says it is GPU 2, sysfs says GPU 3: which is right is not ours to guess.
        _name(OTHER): {"pciAddr": WHOLE.address, "type": "amdgpu"},
        _name(CPX, 0): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
        _name(CPX, 3): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
    }, {"whole": _name(WHOLE), "lied-to": _name(OTHER), "part-0": _name(CPX, 0), "part-3": _name(CPX, 3)}, "part-3")
    assert _holders_by_gpu(text) == {"2": {"whole"}, "7": {"part-0"}, "10": {"part-3"}}
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "1"
    # The first partition, at its GPU's own address, is one of the eight sysfs shows in use, as the others are.
    assert _allocated(text) == {"whole": 1.0, "part-0": 0.125, "part-3": 0.125}
