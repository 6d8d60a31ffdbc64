"""AMD's resources and device-ID forms: GPUs recognised, partitions in both folder spellings, the rest unresolved."""

from __future__ import annotations

import pytest

from exporter.vendors.amd.device_ids import (DRA, PARTITION, PCI, DeviceRef, dra_indices, is_gpu_device,
                                             is_gpu_resource, normalise_pci_address, parse_device_id)


@pytest.mark.parametrize("resource", ["amd.com/gpu", "amd.com/cpx_nps4", "amd.com/spx_nps1", "amd.com/dpx_nps2",
                                      "amd.com/qpx_nps1", "amd.com/tpx_nps1", "amd.com/cpx_nps8"])
def test_gpu_resources_of_both_naming_strategies_are_gpus(resource):
    assert is_gpu_resource(resource) and is_gpu_device(resource)


@pytest.mark.parametrize("resource", ["amd.com/nic", "amd.com/vnic", "amd.com/xgmi", "amd.com/gpux", "amd.com/cpx",
                                      "amd.com/cpx_nps3", "amd.com/CPX_NPS4", "amd.com/spx_nps1_x", "nvidia.com/gpu",
                                      "gpu.amd.com", "amd.com/"])
def test_other_resources_are_not_gpus(resource):
    assert not is_gpu_resource(resource) and not is_gpu_device(resource)


def test_only_the_amd_dra_driver_counts_under_dra():
    assert is_gpu_device("gpu.amd.com", dra=True)
    assert not is_gpu_device("gpu.nvidia.com", dra=True)
    assert not is_gpu_device("amd.com/gpu", dra=True)  # a resource name is not a driver


@pytest.mark.parametrize("device_id, expected", [
    ("0000:19:00.0", DeviceRef(PCI, "0000:19:00.0")),
    ("0000:C1:00.0", DeviceRef(PCI, "0000:c1:00.0")),
    ("0001:Ab:1F.7", DeviceRef(PCI, "0001:ab:1f.7")),
    ("amdgpu_xcp_3", DeviceRef(PARTITION, "amdgpu_xcp_3")),
    ("amdgpu_xcp.3", DeviceRef(PARTITION, "amdgpu_xcp_3")),
    ("amdgpu_xcp_30", DeviceRef(PARTITION, "amdgpu_xcp_30")),
])
def test_device_plugin_ids_name_one_device_each(device_id, expected):
    assert parse_device_id(device_id) == expected


@pytest.mark.parametrize("device_id", ["19:00.0", "0000:19:00", "0000:19:00:0", "0000:19:00.8", "0000:g9:00.0",
                                       "amdgpu_xcp", "amdgpu_xcp_", "amdgpu_xcp-3", "amdgpu_xcp_3a", "xcp_3", "0",
                                       "GPU-3dff74a1", "gpu-1-129", "", " 0000:19:00.0"])
def test_unknown_device_plugin_forms_are_unresolved(device_id):
    assert parse_device_id(device_id) is None


def test_dra_devices_are_named_by_card_and_render_minor():
    assert parse_device_id("gpu-32-160", dra=True) == DeviceRef(DRA, "gpu-32-160")
    assert dra_indices("gpu-32-160") == (32, 160)
    for name in ("gpu-32", "gpu-1-129-x", "GPU-1-129", "0000:19:00.0", "gpu--1-2"):
        assert parse_device_id(name, dra=True) is None and dra_indices(name) is None


def test_a_pci_address_is_normalised_only_when_it_is_one():
    assert normalise_pci_address("0000:E5:00.1") == "0000:e5:00.1"
    assert normalise_pci_address("0000:e5:00:0") is None  # the device plugin's parent key, not an address
