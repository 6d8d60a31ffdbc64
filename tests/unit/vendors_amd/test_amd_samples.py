"""AMD's samples rewritten through the core with AMD's dialect: ours replace AMD's holder labels, a partitioned GPU's
whole-GPU figures go to no holder, prefixed names alike, and our rows name a device by gpu_id, gpu_partition_id, gpu_uuid."""

from __future__ import annotations

from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import Allocation, Mapping
from exporter.exposition.allocation import render_allocation_info
from exporter.exposition.labels import DEFAULT_DIALECT, device_label_pairs, gpu_label_pairs, identities_by_key
from exporter.exposition.rewriter import Rewriter
from exporter.vendors.amd.figures import AMD_DIALECT, AMD_FIGURES
from exporter.vendors.amd.forms import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_DIALECT

EMBED_0, EMBED_1 = Owner("batch", "embed-0", "worker"), Owner("batch", "embed-1", "worker")
MAPPING = Mapping(owners={GpuKey("gpu", "7", ""): (EMBED_0,), GpuKey("gpu", "8", ""): (EMBED_1,)},
                  allocations=(Allocation(EMBED_0, "amd.com/cpx_nps1", "0000:e5:00.0", GpuKey("gpu", "7", "")),
                               Allocation(EMBED_1, "amd.com/cpx_nps1", "amdgpu_xcp_49", GpuKey("gpu", "8", "")),
                               Allocation(EMBED_1, "amd.com/cpx_nps1", "amdgpu_xcp_50", None)),
                  forms=DEVICE_FORMS)


def _labels(gpu_id: str, partition: str, mode: str = "cpx", holder: str = "stale-pod") -> str:
    return (f'gpu_compute_partition_type="{mode}",gpu_id="{gpu_id}",gpu_partition_id="{partition}",'
            f'gpu_uuid="u-{gpu_id}",hostname="n",job_id="",namespace="x",pod="{holder}",pod_uuid="",container="c"')


def _rewritten(body: str) -> list:
    return Rewriter(MAPPING, dialect=AMD_DIALECT).rewrite(body.encode()).text.decode().splitlines()


def test_our_holder_replaces_amds_and_its_own_labels_are_removed():
    lines = _rewritten(f"gpu_used_vram{{{_labels('8', '1')}}} 7000\n")
    assert lines == ['gpu_used_vram{gpu_compute_partition_type="cpx",gpu_id="8",gpu_partition_id="1",gpu_uuid="u-8",'
                     'hostname="n",namespace="batch",pod="embed-1",container="worker"} 7000']


def test_a_partitioned_gpus_whole_gpu_figures_go_to_no_holder_its_own_figures_to_its_holder():
    body = "".join(f"{name}{{{_labels('7', '0')}}} 1\n" for name in (
        "gpu_gfx_activity", "amd_gpu_package_power", "gpu_energy_consumed", "gpu_used_vram", "amd_gpu_used_vram"))
    owned = {line.split("{")[0]: 'pod="embed-0"' in line for line in _rewritten(body)}
    assert owned == {"gpu_gfx_activity": False, "amd_gpu_package_power": False, "gpu_energy_consumed": False,
                     "gpu_used_vram": True, "amd_gpu_used_vram": True}
    assert not [line for line in _rewritten(body) if "stale-pod" in line or "pod_uuid" in line]


def test_a_whole_gpus_activity_goes_to_its_holder():
    mapping = Mapping(owners={GpuKey("gpu", "0", ""): (EMBED_0,)}, forms=DEVICE_FORMS)
    body = f"gpu_gfx_activity{{{_labels('0', '0', mode='spx')}}} 80\n"
    assert 'pod="embed-0"' in Rewriter(mapping, dialect=AMD_DIALECT).rewrite(body.encode()).text.decode()


def test_our_rows_name_a_device_as_amds_samples_do():
    identities = Rewriter(MAPPING, dialect=AMD_DIALECT).rewrite(
        f"gpu_used_vram{{{_labels('8', '1')}}} 1\n".encode()).identities
    assert identities == {GpuIdentity("u-8", "8", "", "", "1")}
    assert gpu_label_pairs(next(iter(identities)), AMD_DIALECT) == (
        ("gpu_id", "8"), ("gpu_partition_id", "1"), ("gpu_uuid", "u-8"))
    # A device no sample names (AMD's exporter down) keeps its gpu_id; an unresolved one names nothing.
    assert device_label_pairs(GpuKey("gpu", "7", ""), identities_by_key(identities), AMD_DIALECT) == (("gpu_id", "7"),)
    rows = render_allocation_info(MAPPING, identities, "kubernetes", dialect=AMD_DIALECT).splitlines()
    assert ('pod_gpu_allocation_info{namespace="batch",pod="embed-1",container="worker",resource="amd.com/cpx_nps1",'
            'device_id="amdgpu_xcp_49",gpu_id="8",gpu_partition_id="1",gpu_uuid="u-8"} 1') in rows
    assert ('pod_gpu_allocation_info{namespace="batch",pod="embed-0",container="worker",resource="amd.com/cpx_nps1",'
            'device_id="0000:e5:00.0",gpu_id="7"} 1') in rows
    assert ('pod_gpu_allocation_info{namespace="batch",pod="embed-1",container="worker",resource="amd.com/cpx_nps1",'
            'device_id="amdgpu_xcp_50"} 1') in rows


def test_the_figures_carry_the_dialect_and_nvidia_keeps_the_labels_every_series_had():
    assert AMD_FIGURES.dialect is AMD_DIALECT
    assert DCGM_DIALECT == DEFAULT_DIALECT
    assert DEFAULT_DIALECT.identity_of({"uuid": "GPU-1", "gpu": "0", "GPU_I_ID": "3"}) == GpuIdentity("GPU-1", "0", "", "3")
