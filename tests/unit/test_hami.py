"""HAMi: its replica device IDs, its pod annotation read, and attribution and shares that follow it."""

from __future__ import annotations

import pytest

from exporter.core import hami
from exporter.core.allocated import allocated_gpus, count_offered
from exporter.vendors.nvidia.device_ids import key_for_device
from exporter.core.identity import GpuKey, Owner
from exporter.core.mapping import build_mapping
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from support.mapping_contexts import StaticContext

GPU_A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
GPU_B = "GPU-5d9cc71f-b438-dc00-707d-c6c12bcfede1"
BOUND = {hami.BIND_PHASE_ANNOTATION: "success"}


def _annotations(value: str, phase: str = "success") -> dict:
    return {hami.ALLOCATED_ANNOTATION: value, hami.BIND_PHASE_ANNOTATION: phase}


@pytest.mark.parametrize("device_id, gpu", [
    (GPU_A + "-0", GPU_A), (GPU_A + "-9", GPU_A), (GPU_A + "-12", GPU_A),
    (GPU_A, None), (GPU_A + "::3", None), ("MIG-" + GPU_A[4:], None), ("GPU-abc-1", None), (GPU_A + "-x", None),
])
def test_a_replica_is_a_whole_gpu_uuid_and_a_number(device_id, gpu):
    assert hami.replica_gpu(device_id) == gpu


def test_a_replica_id_resolves_to_its_gpu_without_the_api():
    assert key_for_device(GPU_A + "-3") == GpuKey("UUID", GPU_A, "")
    # The other forms keep their keys: a time-slicing replica, a GPU UUID alone.
    assert key_for_device(GPU_A + "::3") == GpuKey("UUID", GPU_A, "")
    assert key_for_device(GPU_A) == GpuKey("UUID", GPU_A, "")


def test_replicas_count_per_gpu_as_time_slicing_ones_do():
    offered = [("nvidia.com/gpu", f"{GPU_A}-{i}") for i in range(10)] + [("nvidia.com/gpu", f"{GPU_B}-{i}")
                                                                          for i in range(10)]
    assert count_offered(offered, DEVICE_FORMS) == {("nvidia.com/gpu", GPU_A): 10, ("nvidia.com/gpu", GPU_B): 10}


def test_the_annotation_lists_every_container_in_spec_order():
    value = f"{GPU_A},NVIDIA,3000,30:;;{GPU_B},NVIDIA,5000,0:{GPU_A},NVIDIA,1000,10:;"
    assert hami.assignment(_annotations(value), [], ["a", "sidecar", "b"]) == {
        "a": (hami.HamiDevice(GPU_A, 3000, 30),),
        "b": (hami.HamiDevice(GPU_B, 5000, 0), hami.HamiDevice(GPU_A, 1000, 10)),
    }


def test_init_containers_come_first_when_listed_and_are_skipped_when_not():
    # HAMi v2.9 and later list the init containers first; before, only the app containers.
    with_init = f";{GPU_A},NVIDIA,3000,30:;"
    assert hami.assignment(_annotations(with_init), ["setup"], ["main"]) == {"main": (hami.HamiDevice(GPU_A, 3000, 30),)}
    without = f"{GPU_A},NVIDIA,3000,30:;"
    assert hami.assignment(_annotations(without), ["setup"], ["main"]) == {"main": (hami.HamiDevice(GPU_A, 3000, 30),)}


def test_only_a_bound_pods_annotation_is_followed():
    value = f"{GPU_A},NVIDIA,3000,30:;"
    assert hami.assignment(_annotations(value, "allocating"), [], ["main"]) is None
    assert hami.assignment({hami.ALLOCATED_ANNOTATION: value}, [], ["main"]) is None
    assert hami.assignment(BOUND, [], ["main"]) is None
    assert hami.assignment(None, [], ["main"]) is None


@pytest.mark.parametrize("value", [
    f"{GPU_A},NVIDIA,3000,30:",  # no ';'
    f"{GPU_A},NVIDIA,3000,30;",  # no ':'
    f"{GPU_A},NVIDIA,3000:;",  # three fields
    f"{GPU_A},NVIDIA,3000,30,1:;",  # five
    f"{GPU_A},NVIDIA,lots,30:;",  # memory not a number
    f"{GPU_A},NVIDIA,3000,-5:;",
    f"{GPU_A},NVIDIA,3000,150:;",  # more than the whole GPU's cores
    f",NVIDIA,3000,30:;",  # no UUID
    f"{GPU_A},NVIDIA,3000,30:;{GPU_A},NVIDIA,3000,30:;",  # two entries for one container
    "garbage",
])
def test_a_malformed_annotation_is_refused(value):
    with pytest.raises(hami.MalformedAnnotation):
        hami.assignment(_annotations(value), [], ["main"])


def test_the_share_is_the_cores_else_the_memory_of_the_gpu():
    assert hami.share_of(3000, 30, None) == 0.3
    assert hami.share_of(20000, 0, 80000.0) == 0.25
    assert hami.share_of(20000, 0, None) is None  # the GPU's memory unknown: unknown share
    assert hami.share_of(90000, 0, 80000.0) == 1.0


def _devices(*ids, container="main"):
    return [AllocatedDevice("ml", "infer", container, "nvidia.com/gpu", device_id) for device_id in ids]


def test_attribution_follows_the_annotation_not_the_kubelets_replica():
    # The kubelet picked a replica of GPU_A; HAMi's Allocate gave the container GPU_B.
    context = StaticContext(hami={("ml", "infer"): {"main": (hami.HamiDevice(GPU_B, 3000, 30),)}})
    mapping = build_mapping(DEVICE_FORMS, _devices(GPU_A + "-4"), context=context)
    owner = Owner("ml", "infer", "main")
    assert mapping.owners == {GpuKey("UUID", GPU_B, ""): (owner,)}
    (allocation,) = mapping.allocations
    assert allocation.device_id == GPU_A + "-4" and allocation.hami == (3000, 30)
    assert allocated_gpus(mapping.allocations, DEVICE_FORMS) == {tuple(owner): 0.3}


def test_several_gpus_of_one_container_pair_in_order_and_shares_add():
    given = (hami.HamiDevice(GPU_B, 3000, 50), hami.HamiDevice(GPU_A, 8000, 0))
    context = StaticContext(hami={("ml", "infer"): {"main": given}})
    mapping = build_mapping(DEVICE_FORMS, _devices(GPU_A + "-7", GPU_A + "-2"), context=context)
    assert set(mapping.owners) == {GpuKey("UUID", GPU_A, ""), GpuKey("UUID", GPU_B, "")}
    owner = ("ml", "infer", "main")
    assert allocated_gpus(mapping.allocations, DEVICE_FORMS, gpu_memory_mib={GPU_A: 80000.0}) == {owner: 0.6}
    # Without the GPU's memory, the memory-only device is of unknown share: the cores one still counts.
    assert allocated_gpus(mapping.allocations, DEVICE_FORMS) == {owner: 0.5}


def test_without_an_assignment_the_kubelets_replica_is_used_and_split_as_offered():
    mapping = build_mapping(DEVICE_FORMS, _devices(GPU_A + "-4"), context=StaticContext())
    assert mapping.owners == {GpuKey("UUID", GPU_A, ""): (Owner("ml", "infer", "main"),)}
    offered = {("nvidia.com/gpu", GPU_A): 10}
    assert allocated_gpus(mapping.allocations, DEVICE_FORMS, offered) == {("ml", "infer", "main"): 0.1}


def test_a_container_whose_replica_count_differs_from_the_annotation_is_not_followed():
    context = StaticContext(hami={("ml", "infer"): {"main": (hami.HamiDevice(GPU_B, 3000, 30),)}})
    mapping = build_mapping(DEVICE_FORMS, _devices(GPU_A + "-1", GPU_A + "-2"), context=context)
    assert set(mapping.owners) == {GpuKey("UUID", GPU_A, "")}
    assert all(not allocation.hami for allocation in mapping.allocations)


FB_SCRAPE = f"""# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="{GPU_A}",device="nvidia0"}} 60000
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="{GPU_A}",device="nvidia0",GPU_I_ID="3"}} 9000
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{GPU_A}",device="nvidia0"}} 19489
DCGM_FI_DEV_FB_RESERVED{{gpu="0",UUID="{GPU_A}",device="nvidia0"}} 511
DCGM_FI_DEV_FB_TOTAL{{gpu="1",uuid="{GPU_B}"}} 46068
DCGM_FI_DEV_FB_FREE{{gpu="1",uuid="{GPU_B}"}} 1
DCGM_FI_DEV_FB_USED{{gpu="1",uuid="{GPU_B}"}} 1
""".encode()


def test_a_gpus_memory_is_read_from_dcgm_exporters_framebuffer_fields():
    from exporter.exposition.gpu_memory import framebuffer_mib

    # Free + used + reserved of the whole GPU (a MIG instance's own line is not its GPU's); FB_TOTAL where
    # served (the legacy textfile's `uuid` label too); only the GPUs asked about.
    assert framebuffer_mib(FB_SCRAPE, [GPU_A, GPU_B], DCGM_FIGURES) == {GPU_A: 80000.0, GPU_B: 46068.0}
    assert framebuffer_mib(FB_SCRAPE, [GPU_B], DCGM_FIGURES) == {GPU_B: 46068.0}
    assert framebuffer_mib(b"DCGM_FI_DEV_FB_FREE{UUID=\"%s\"} 5\n" % GPU_A.encode(), [GPU_A], DCGM_FIGURES) == {}  # no USED
