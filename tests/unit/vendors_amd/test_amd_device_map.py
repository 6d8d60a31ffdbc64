"""Kubelet devices met with the AMD exporter's GPU IDs: whole GPUs, partitions and DRA devices each to their own
gpu_id, through sysfs and the identity service's addresses; anything that does not join is unresolved."""

from __future__ import annotations

import pytest

from exporter.vendors.amd.demo_sysfs import mi300x_node, write_sysfs
from exporter.vendors.amd.device_ids import parse_device_id
from exporter.vendors.amd.device_map import (NO_IDENTITY, NOT_IN_SYSFS, NOT_LISTED, SLICE_DISAGREES, AmdGpu,
                                             resolve)
from exporter.vendors.amd.identity import make_snapshot
from exporter.vendors.amd.identity_client import HEALTHY, GpuState
from exporter.vendors.amd.sysfs_layout import read_layout

NODE = mi300x_node(cpx_gpus=(7,))
# amdsmi's indices: the whole GPUs 0-6, then the CPX GPU's partitions 7-14, each at its own function.
STATES = tuple([GpuState(str(g.index), f"uuid-{g.index}", HEALTHY, g.address) for g in NODE[:7]]
               + [GpuState(str(7 + p), "", HEALTHY, NODE[7].partition_address(p)) for p in range(8)])
IDENTITY = make_snapshot(True, STATES)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("sys")
    write_sysfs(str(root), NODE)
    return read_layout(str(root))


def _resolve(layout, device_id, dra=False, identity=IDENTITY, slice_pci_address=""):
    return resolve(parse_device_id(device_id, dra), layout, identity, slice_pci_address)


@pytest.mark.parametrize("device_id", ["0000:85:00.0", "0000:85:00.0".upper()])
def test_a_whole_gpu_by_its_pci_address_in_either_case(layout, device_id):
    assert _resolve(layout, device_id).gpu == AmdGpu("4", "uuid-4", "0000:85:00.0", False, False)


def test_each_partition_is_its_own_gpu(layout):
    first = _resolve(layout, "0000:E5:00.0").gpu
    assert first == AmdGpu("7", "", "0000:e5:00.0", True, True)  # carries the whole GPU's figures
    for offset, xcp in enumerate(range(49, 56), start=1):
        for spelling in (f"amdgpu_xcp_{xcp}", f"amdgpu_xcp.{xcp}"):
            gpu = _resolve(layout, spelling).gpu
            assert gpu == AmdGpu(str(7 + offset), "", f"0000:e5:00.{offset}", True, False), spelling


def test_dra_devices_meet_the_same_gpus(layout):
    assert _resolve(layout, "gpu-32-160", dra=True).gpu.gpu_id == "4"
    assert _resolve(layout, "gpu-56-184", dra=True).gpu.gpu_id == "7"
    assert _resolve(layout, "gpu-63-191", dra=True).gpu.gpu_id == "14"


def test_a_resource_slice_address_is_used_and_checked(layout):
    assert _resolve(layout, "gpu-32-160", dra=True, slice_pci_address="0000:85:00.0").gpu.gpu_id == "4"
    assert _resolve(layout, "gpu-32-160", dra=True, slice_pci_address="0000:05:00.0").unresolved == SLICE_DISAGREES
    # A device sysfs does not show (the API's view of a node whose sysfs is not mounted) goes by the slice.
    assert _resolve(layout, "gpu-90-200", dra=True, slice_pci_address="0000:27:00.0").gpu.gpu_id == "1"


def test_what_does_not_join_is_unresolved_with_its_reason(layout):
    assert _resolve(layout, "0000:85:00.0", identity=make_snapshot(False, ())).unresolved == NO_IDENTITY
    assert _resolve(layout, "amdgpu_xcp_0").unresolved == NOT_IN_SYSFS  # a whole GPU's idle xcp folder
    assert _resolve(layout, "gpu-1-129", dra=True).unresolved == NOT_IN_SYSFS
    assert _resolve(layout, "0000:99:00.0").unresolved == NOT_LISTED
    partial = make_snapshot(True, STATES[:8])  # the service lists only the CPX GPU's first partition
    assert _resolve(layout, "amdgpu_xcp_49", identity=partial).unresolved == NOT_LISTED


def test_a_kept_answer_still_resolves_while_the_service_is_down(layout):
    kept = make_snapshot(False, STATES, "AMD identity socket … not found")
    assert _resolve(layout, "amdgpu_xcp_55", identity=kept).gpu.gpu_id == "14"


def test_each_device_knows_how_many_parts_sysfs_shows_its_gpu_split_into(layout):
    assert _resolve(layout, "0000:85:00.0").parts == 1
    assert _resolve(layout, "gpu-32-160", dra=True).parts == 1
    # The CPX GPU's first partition is named by its GPU's address, yet it is one of eight.
    assert _resolve(layout, "0000:e5:00.0").parts == 8
    assert _resolve(layout, "amdgpu_xcp_55").parts == 8
    assert _resolve(layout, "gpu-63-191", dra=True).parts == 8
    # Met by its slice alone, the device is not in sysfs: how its GPU is split is not known from here.
    assert _resolve(layout, "gpu-90-200", dra=True, slice_pci_address="0000:27:00.0").parts == 0


def _resolve_partition(layout, device_id, parent):
    return resolve(parse_device_id(device_id, True), layout, IDENTITY, slice_parent_address=parent)


def test_a_partitions_slice_names_only_its_gpu_which_sysfs_is_checked_against(layout):
    assert _resolve_partition(layout, "gpu-63-191", "0000:E5:00.0").gpu.gpu_id == "14"
    assert _resolve_partition(layout, "gpu-63-191", "0000:05:00.0").unresolved == SLICE_DISAGREES
    # Without sysfs a partition is never taken for its GPU, whose address alone its slice gives.
    assert _resolve_partition(layout, "gpu-90-200", "0000:e5:00.0").unresolved == NOT_IN_SYSFS
