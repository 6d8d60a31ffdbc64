"""--gpu.vendor auto's judgement (core.vendor_choice), with each registered vendor's real device forms: which signs
name which vendor, in which turn, and that nothing is guessed."""

from __future__ import annotations

import pytest

from exporter.auto_vendor import candidates, fallback_vendor
from exporter.config import parse_config
from exporter.core.vendor_choice import NodeSigns, choose_vendor
from exporter.sources.kubelet import AllocatedDevice

SOCKET = "/var/lib/amd-metrics-exporter/amdgpu_device_metrics_exporter_grpc.socket"
NVIDIA_UUID = "GPU-5e1f0c3a-0000-4d2b-9a61-0demo0000000"


@pytest.fixture(scope="module")
def registered():
    return candidates(parse_config([], {}))


def held(resource: str, device_id: str, dra: bool = False) -> AllocatedDevice:
    return AllocatedDevice("team", "pod", "main", resource, device_id, dra=dra)


def test_the_fallback_is_the_first_registered_vendor_and_the_amd_socket_its_marker(registered):
    assert fallback_vendor() == "nvidia"
    assert {c.name: c.marker_paths for c in registered} == {"nvidia": (), "amd": (SOCKET,)}


@pytest.mark.parametrize("resource, device_id", [
    ("amd.com/gpu", "0000:05:00.0"), ("amd.com/gpu", "0000:C7:00.0"), ("amd.com/cpx_nps4", "amdgpu_xcp_3"),
    ("amd.com/spx_nps1", "0000:27:00.0")])
def test_an_amd_gpu_resource_offered_names_amd(registered, resource, device_id):
    choice = choose_vendor(registered, NodeSigns(offered=[(resource, device_id)]), "nvidia")
    assert choice is not None and choice.vendor == "amd" and resource in choice.reason


def test_an_amd_gpu_held_names_amd_though_nothing_is_offered(registered):
    choice = choose_vendor(registered, NodeSigns(held=[held("amd.com/gpu", "0000:05:00.0")]), "nvidia")
    assert choice.vendor == "amd"


def test_amd_nics_are_no_gpus_and_name_no_vendor(registered):
    signs = NodeSigns(offered=[("amd.com/nic", "0000:0c:00.0")], held=[held("amd.com/nic", "0000:0c:00.0")])
    assert choose_vendor(registered, signs, "nvidia") is None


@pytest.mark.parametrize("signs", [
    NodeSigns(held=[held("gpu.amd.com", "gpu-8-136", dra=True)]),  # a DRA-only node with a claim held
    NodeSigns(slice_drivers={"gpu.amd.com"}),                       # its ResourceSlices, nothing claimed yet
])
def test_amds_dra_driver_names_amd(registered, signs):
    choice = choose_vendor(registered, signs, "nvidia")
    assert choice.vendor == "amd" and "gpu.amd.com" in choice.reason


def test_the_amd_identity_socket_names_amd(registered):
    choice = choose_vendor(registered, NodeSigns(present_paths={SOCKET}), "nvidia")
    assert choice.vendor == "amd" and SOCKET in choice.reason


@pytest.mark.parametrize("signs", [
    NodeSigns(offered=[("nvidia.com/gpu", NVIDIA_UUID)]),
    NodeSigns(held=[held("nvidia.com/gpu.shared", NVIDIA_UUID + "::1")]),
    NodeSigns(held=[held("gpu.nvidia.com", "gpu-0", dra=True)]),
    NodeSigns(slice_drivers={"gpu.nvidia.com"}),
])
def test_nvidias_resources_and_driver_name_nvidia(registered, signs):
    assert choose_vendor(registered, signs, "nvidia").vendor == "nvidia"


def test_any_amd_sign_wins_over_nvidias_and_resources_are_told_first(registered):
    signs = NodeSigns(offered=[("nvidia.com/gpu", NVIDIA_UUID), ("amd.com/gpu", "0000:05:00.0")],
                      slice_drivers={"gpu.nvidia.com", "gpu.amd.com"}, present_paths={SOCKET})
    choice = choose_vendor(registered, signs, "nvidia")
    assert choice.vendor == "amd" and "amd.com/gpu" in choice.reason


def test_nothing_seen_names_no_vendor(registered):
    assert choose_vendor(registered, NodeSigns(offered=[("example.com/fpga", "0")]), "nvidia") is None
