"""The AMD exporter's dialect read from real-shaped sample lines: identity, node, its own owner labels, the figures
with or without the amd_ prefix, and the whole-GPU figures of a partitioned GPU."""

from __future__ import annotations

import pytest

from exporter.exposition.text import parse_label_pairs
from exporter.vendors.amd.dialect import (ENERGY, HEALTH, MEMORY_TOTAL, MEMORY_USED, POWER, UPSTREAM_OWNER_LABELS,
                                          UTILIZATION, SampleIdentity, figure_of, identity_of, is_partitioned,
                                          is_whole_gpu_figure, node_name, unprefixed)

# A line an AMD exporter served (quoted in silogen/kaiwo), labels sorted as its Go client writes them.
REAL_LINE = ('gpu_gfx_activity{card_model="102-G30211-0C",card_series="AMD Instinct MI300X OAM",card_vendor="AMD",'
             'container="workload",driver_version="6.12.12",gpu_compute_partition_type="spx",gpu_id="0",'
             'gpu_memory_partition_type="nps1",gpu_partition_id="0",'
             'gpu_uuid="3dff74a1-0000-1000-80d3-0c4c1df1df58",hostname="tw038",namespace="default",'
             'pod="high-utilization-57ls6",serial_number="692409005328"} 100')


def _labels(line: str) -> dict:
    head = line.rsplit(" ", 1)[0]
    return {name: value for name, value, _ in parse_label_pairs(head[head.index("{") + 1:-1])}


def test_a_real_line_names_its_gpu_node_and_owner():
    labels = _labels(REAL_LINE)
    assert identity_of(labels) == SampleIdentity("0", "0", "3dff74a1-0000-1000-80d3-0c4c1df1df58")
    assert node_name(labels) == "tw038"
    assert {"pod", "namespace", "container"} <= UPSTREAM_OWNER_LABELS and set(labels) & UPSTREAM_OWNER_LABELS == {
        "pod", "namespace", "container"}
    assert not is_partitioned(labels) and not is_whole_gpu_figure("gpu_gfx_activity", labels)


def test_its_owner_labels_are_all_seven_and_nothing_of_the_gpu():
    assert UPSTREAM_OWNER_LABELS == {"pod", "namespace", "container", "pod_uuid", "job_id", "job_user",
                                     "job_partition"}
    assert not UPSTREAM_OWNER_LABELS & {"gpu_id", "gpu_partition_id", "gpu_uuid", "hostname", "serial_number"}


@pytest.mark.parametrize("prefix", ["", "amd_"])
@pytest.mark.parametrize("name, figure, scale", [
    ("gpu_gfx_activity", UTILIZATION, 0.01), ("gpu_used_vram", MEMORY_USED, 1048576.0),
    ("gpu_total_vram", MEMORY_TOTAL, 1048576.0), ("gpu_package_power", POWER, 1.0),
    ("gpu_power_usage", POWER, 1.0), ("gpu_energy_consumed", ENERGY, 1e-6), ("gpu_health", HEALTH, 1.0)])
def test_figures_are_found_with_or_without_the_prefix(prefix, name, figure, scale):
    found = figure_of(prefix + name)
    assert found.figure == figure and found.scale == scale


def test_other_names_carry_no_figure():
    for name in ("gpu_edge_temperature", "gpu_free_vram", "xgpu_gfx_activity", "amdgpu_gfx_activity",
                 "amd_amd_gpu_gfx_activity", "DCGM_FI_DEV_GPU_UTIL"):
        assert figure_of(name) is None, name
    assert unprefixed("amd_gpu_health") == "gpu_health" and unprefixed("gpu_health") == "gpu_health"


def test_on_a_partitioned_gpu_activity_power_and_energy_are_the_whole_gpus():
    first = {"gpu_id": "7", "gpu_partition_id": "0", "gpu_compute_partition_type": "cpx"}
    other = dict(first, gpu_id="8", gpu_partition_id="1")
    for name in ("gpu_gfx_activity", "amd_gpu_package_power", "gpu_power_usage", "gpu_energy_consumed",
                 "gpu_umc_activity"):
        assert is_whole_gpu_figure(name, first) and is_whole_gpu_figure(name, other)
    for name in ("gpu_used_vram", "gpu_total_vram", "gpu_health"):
        assert not is_whole_gpu_figure(name, first)
    assert figure_of("gpu_gfx_activity").device_wide and not figure_of("gpu_used_vram").device_wide


def test_a_sample_without_a_gpu_id_is_about_no_gpu():
    assert identity_of({"hostname": "n1"}) is None and identity_of({"gpu_id": ""}) is None
    assert identity_of({"gpu_id": "3", "gpu_partition_id": "NA"}) == SampleIdentity("3", "NA", "")


def test_a_gpu_that_cannot_be_partitioned_is_whole():
    mi210 = {"gpu_id": "3", "gpu_partition_id": "NA", "gpu_compute_partition_type": "none"}
    assert not is_partitioned(mi210) and not is_whole_gpu_figure("gpu_gfx_activity", mi210)
