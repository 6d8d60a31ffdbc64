"""The node's AMD devices read from sysfs trees built from exactly the files ROCm's device plugin and DRA driver
read: whole GPUs, partitions in both folder spellings, KFD's addresses, and nothing guessed where they disagree."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node, write_sysfs
from exporter.vendors.amd.sysfs_layout import read_layout

KFD = Path("class", "kfd", "kfd", "topology", "nodes")


def _tree(tmp_path, gpus) -> str:
    root = tmp_path / "sys"
    write_sysfs(str(root), gpus)
    return str(root)


def test_a_node_with_one_cpx_gpu_has_eight_whole_gpus_and_seven_further_partitions(tmp_path):
    layout = read_layout(_tree(tmp_path, mi300x_node(cpx_gpus=(7,))))
    assert [d.device_id for d in layout.devices[:8]] == [
        "0000:05:00.0", "0000:27:00.0", "0000:47:00.0", "0000:65:00.0", "0000:85:00.0", "0000:a7:00.0",
        "0000:c7:00.0", "0000:e5:00.0"]
    partitions = layout.devices[8:]
    assert [d.device_id for d in partitions] == [f"amdgpu_xcp_{n}" for n in range(49, 56)]
    assert [d.pci_address for d in partitions] == [f"0000:e5:00.{f}" for f in range(1, 8)]
    assert {d.parent_address for d in partitions} == {"0000:e5:00.0"}
    assert {(d.compute_partition, d.memory_partition) for d in partitions} == {("cpx", "nps1")}
    assert layout.by_device_id["0000:05:00.0"].compute_partition == "spx"  # read from the file's "SPX"
    assert layout.by_dra_name["gpu-32-160"].device_id == "0000:85:00.0"  # the DRA driver's example name
    assert layout.by_dra_name["gpu-57-185"].device_id == "amdgpu_xcp_49"
    # The whole GPUs' xcp folders exist too, but KFD lists none of their render nodes: not in use.
    assert "amdgpu_xcp_0" not in layout.by_device_id and "gpu-1-129" not in layout.by_dra_name


def test_a_node_all_in_cpx_has_sixty_four_devices_each_at_its_own_address(tmp_path):
    layout = read_layout(_tree(tmp_path, mi300x_node(cpx_gpus=range(8))))
    assert len(layout.devices) == 64 == len({d.pci_address for d in layout.devices})
    assert len(layout.by_device_id) == 64 == len(layout.by_dra_name)


def test_a_qpx_gpu_in_another_pci_domain(tmp_path):
    # The numbers of AMD's MI308 fixture: domain 1, bus 0x0b, four partitions at render 160-163.
    layout = read_layout(_tree(tmp_path, [GpuSpec(0x0B, 4, "qpx", "nps4", 4, domain=1)]))
    assert [(d.device_id, d.pci_address, d.render_minor) for d in layout.devices] == [
        ("0001:0b:00.0", "0001:0b:00.0", 160), ("amdgpu_xcp_28", "0001:0b:00.1", 161),
        ("amdgpu_xcp_29", "0001:0b:00.2", 162), ("amdgpu_xcp_30", "0001:0b:00.3", 163)]


def test_the_dotted_folder_spelling_gives_the_same_ids(tmp_path):
    layout = read_layout(_tree(tmp_path, [GpuSpec(0xE5, 7, "cpx", "nps1", 8, xcp_separator=".")]))
    assert sorted(layout.by_device_id)[1:] == [f"amdgpu_xcp_{n}" for n in range(49, 56)]


def test_one_partition_under_both_spellings_is_neither(tmp_path):
    root = _tree(tmp_path, [GpuSpec(0xE5, 7, "cpx", "nps1", 8)])
    platform = Path(root, "devices", "platform")
    shutil.copytree(platform / "amdgpu_xcp_50", platform / "amdgpu_xcp.50")
    layout = read_layout(root)
    assert "amdgpu_xcp_50" not in layout.by_device_id and "amdgpu_xcp_51" in layout.by_device_id


def test_without_kfd_whole_gpus_are_known_and_partitions_are_not(tmp_path):
    root = _tree(tmp_path, mi300x_node(cpx_gpus=(7,)))
    shutil.rmtree(Path(root, "class"))
    layout = read_layout(root)
    assert len(layout.devices) == 8 and all(d.device_id.startswith("0000:") for d in layout.devices)


def test_a_render_minor_kfd_lists_twice_is_nobody(tmp_path):
    root = _tree(tmp_path, [GpuSpec(0xE5, 7, "cpx", "nps1", 8)])
    nodes = Path(root, KFD)
    text = (nodes / "4" / "properties").read_text()  # partition 2's node (after two CPU nodes)
    (nodes / "99").mkdir()
    (nodes / "99" / "properties").write_text(text.replace("location_id 58626", "location_id 58629"))
    layout = read_layout(root)
    assert "amdgpu_xcp_50" not in layout.by_device_id and "amdgpu_xcp_49" in layout.by_device_id


def test_kfd_placing_a_gpu_elsewhere_than_its_folder_leaves_it_out(tmp_path):
    root = _tree(tmp_path, [GpuSpec(0x05, 0), GpuSpec(0x27, 1)])
    properties = Path(root, KFD, "2", "properties")
    properties.write_text(properties.read_text().replace("location_id 1280", "location_id 1536"))
    assert [d.device_id for d in read_layout(root).devices] == ["0000:27:00.0"]


def test_a_partition_whose_gpu_has_no_folder_is_left_out(tmp_path):
    root = _tree(tmp_path, [GpuSpec(0xE5, 7, "cpx", "nps1", 8)])
    os.unlink(Path(root, "module", "amdgpu", "drivers", "pci:amdgpu", "0000:e5:00.0"))
    assert read_layout(root).devices == ()


def test_a_gpu_folder_without_its_render_node_is_left_out(tmp_path):
    root = _tree(tmp_path, [GpuSpec(0x05, 0), GpuSpec(0x27, 1)])
    Path(root, "devices", "pci0000:00", "0000:05:00.0", "drm", "renderD128").rmdir()
    assert [d.device_id for d in read_layout(root).devices] == ["0000:27:00.0"]


def test_no_driver_and_no_root_are_an_empty_node(tmp_path):
    assert read_layout(str(tmp_path)).devices == ()
    assert read_layout(str(tmp_path / "missing")).devices == ()


def test_the_writer_writes_what_rocm_reads_and_links_the_driver_folder_as_a_node_does(tmp_path):
    root = Path(_tree(tmp_path, [GpuSpec(0xE5, 7, "cpx", "nps1", 8)]))
    gpu = root / "module" / "amdgpu" / "drivers" / "pci:amdgpu" / "0000:e5:00.0"
    assert gpu.is_symlink() and (gpu / "current_compute_partition").read_text() == "CPX\n"
    assert sorted(p.name for p in (gpu / "drm").iterdir()) == ["card56", "renderD184"]
    assert sorted(p.name for p in (root / "devices" / "platform" / "amdgpu_xcp_49" / "drm").iterdir()) == [
        "card57", "renderD185"]
    lines = (root / KFD / "3" / "properties").read_text().splitlines()
    assert {"location_id 58625", "domain 0", "drm_render_minor 185"} <= set(lines)
