"""Taints on AMD's DRA devices (a ResourceSlice device's own, and a DeviceTaintRule's) served as pod_gpu_device_taint
named by the AMD samples' identity labels, so that they join the device's samples and its pod_gpu_allocation_info;
a device whose gpu_id cannot be known (the identity service not answering, a partition without sysfs) gets no row."""

from __future__ import annotations

import time

import requests

from exporter.vendors.amd.demo_node import CPX_GPU
from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node
from support.amd_node import AmdNode, amd_slice, hold_through_claim, samples
from support.fake_kube_api import write_kubeconfig
from support.kube_scenario import NODE
from support.waiting import wait_until

SPECS = mi300x_node(cpx_gpus=(CPX_GPU,))
WHOLE, CPX = SPECS[2], SPECS[CPX_GPU]  # gpu_id 2; the CPX GPU, whose partitions are gpu_id 7-14
RULES = "resource.k8s.io/v1"
IDENTITY = ("gpu_id", "gpu_partition_id", "gpu_uuid")  # the labels AMD's samples name a device by
DRAINING = {"key": "gpu.amd.com/ecc", "value": "uncorrectable", "effect": "NoExecute"}
MAINTENANCE = {"key": "example.com/maintenance", "value": "rack-7", "effect": "NoSchedule"}


def _name(spec: GpuSpec, partition: int = 0) -> str:
    return f"gpu-{spec.card + partition}-{spec.render + partition}"


def _tainted_node(amd: AmdNode, api, tmp_path) -> None:
    """The slice with the whole GPU tainted by its driver, a DeviceTaintRule tainting the CPX GPU's fourth
    partition, a pod holding each of them and one an untainted partition; the exporter served on it."""
    api.serve_kind(RULES, "devicetaintrules", "DeviceTaintRule", namespaced=False)
    api.put(RULES, "devicetaintrules", {
        "apiVersion": RULES, "kind": "DeviceTaintRule", "metadata": {"name": "drain-partition"},
        "spec": {"deviceSelector": {"driver": "gpu.amd.com", "pool": NODE, "device": _name(CPX, 3)},
                 "taint": MAINTENANCE}})
    api.put("resource.k8s.io/v1", "resourceslices", amd_slice({
        _name(WHOLE): {"pciAddr": WHOLE.address, "type": "amdgpu"},
        _name(CPX, 0): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
        _name(CPX, 3): {"parentPciAddr": CPX.address, "type": "amdgpu-partition"},
    }, taints={_name(WHOLE): [DRAINING]}))
    amd.hold([hold_through_claim(api, pod, device) for pod, device in
              {"whole": _name(WHOLE), "part-0": _name(CPX, 0), "part-3": _name(CPX, 3)}.items()])
    amd.serve(kubeconfig=write_kubeconfig(str(tmp_path / "kubeconfig"), api.url), node_name=NODE)


def _rows(text: str, family: str) -> list:
    return [labels for name, labels, _ in samples(text) if name == family]


def _answer(amd: AmdNode) -> str:
    return requests.get(amd.exporter.url(), timeout=10).text


def _taint_of(labels: dict) -> dict:
    return {name: labels[name] for name in ("key", "value", "effect")}


def _device(labels: dict) -> tuple:
    """A series' device, as `on(gpu_id, gpu_partition_id, gpu_uuid)` compares it (an absent label is "")."""
    return tuple(labels.get(name, "") for name in IDENTITY)


def _allocated_everything(amd: AmdNode, taints: int):
    """The answer once every holder has its allocation row and `taints` taint rows are served, else ""."""
    text = _answer(amd)
    pods = {labels["pod"] for labels in _rows(text, "pod_gpu_allocation_info")}
    return text if pods == {"whole", "part-0", "part-3"} and len(_rows(text, "pod_gpu_device_taint")) == taints else ""


def test_a_tainted_whole_gpu_and_partition_each_give_one_row_joinable_to_their_samples(amd_node, api, tmp_path):
    amd = amd_node()
    _tainted_node(amd, api, tmp_path)
    text = wait_until(lambda: _allocated_everything(amd, 2), 30)
    taints = {labels["gpu_id"]: labels for labels in _rows(text, "pod_gpu_device_taint")}
    assert set(taints) == {"2", "10"}  # the whole GPU, the CPX GPU's fourth partition; not the untainted partition
    assert _taint_of(taints["2"]) == DRAINING and taints["2"]["gpu_partition_id"] == "0"
    assert _taint_of(taints["10"]) == MAINTENANCE and taints["10"]["gpu_partition_id"] == "3"
    # Each row names its device as AMD's samples do: `pod_gpu_device_taint * on(gpu_id, gpu_partition_id, gpu_uuid)
    # group_left gpu_used_vram` finds exactly that device's sample, and the join on pod_gpu_allocation_info finds
    # its holder alone.
    vram = [labels for name, labels, _ in samples(text) if name == "gpu_used_vram"]
    allocations = _rows(text, "pod_gpu_allocation_info")
    for gpu_id, holder in (("2", "whole"), ("10", "part-3")):
        device = _device(taints[gpu_id])
        assert all(device), taints[gpu_id]  # gpu_uuid too: the identity service gives it
        assert [_device(labels) for labels in vram if _device(labels) == device] == [device]
        assert [labels["pod"] for labels in allocations if _device(labels) == device] == [holder]
        # The taint row carries no label of AMD's samples' identity that the samples do not (a join needs all equal).
        assert {name for name in taints[gpu_id] if name.startswith("gpu_")} == set(IDENTITY)


def test_without_sysfs_only_the_whole_gpu_its_slice_addresses_gets_its_row(amd_node, api, tmp_path):
    amd = amd_node(specs=[])  # a partition's slice names only its GPU: which partition it is needs sysfs
    _tainted_node(amd, api, tmp_path)
    text = wait_until(lambda: _allocated_everything(amd, 1), 30)
    time.sleep(1.5)  # three more mappings built: the partition's row would have come by now
    text = _answer(amd)
    assert [(labels["gpu_id"], _taint_of(labels)) for labels in _rows(text, "pod_gpu_device_taint")] == [
        ("2", DRAINING)]


def test_no_row_while_the_identity_service_has_not_answered_then_each_device_its_own(amd_node, api, tmp_path):
    amd = amd_node()
    amd.identity.fault = "unavailable"
    _tainted_node(amd, api, tmp_path)
    text = wait_until(lambda: _allocated_everything(amd, 0), 30)
    time.sleep(1.5)  # three more mappings built, every device still without its gpu_id
    assert _rows(_answer(amd), "pod_gpu_device_taint") == []
    assert {labels["pod"]: labels.get("gpu_id") for labels in _rows(text, "pod_gpu_allocation_info")} == {
        "whole": None, "part-0": None, "part-3": None}
    amd.identity.fault = None  # it answers: each taint comes, on its own device
    text = wait_until(lambda: _allocated_everything(amd, 2), 30)
    assert {labels["gpu_id"]: _taint_of(labels) for labels in _rows(text, "pod_gpu_device_taint")} == {
        "2": DRAINING, "10": MAINTENANCE}
