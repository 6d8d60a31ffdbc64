"""pod_gpu_container_allocated_gpus and the DRA claim labels of pod_gpu_allocation_info."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.base.errors import KubeletError
from exporter.core.allocated import allocated_gpus, count_offered
from exporter.vendors.nvidia.mig_shares import mig_share
from exporter.core.identity import GpuKey
from exporter.core.mapping import DraResolution, build_mapping
from exporter.core.offered import MAX_AGE_SECONDS, OfferedReplicas
from exporter.exposition.allocation import render_allocation_info
from exporter.sources.kubelet import AllocatedDevice, KubeletOptions, PodResourcesClient
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.clocks import ManualClock
from support.mapping_contexts import StaticContext

UUID = "GPU-be839661-c0f5-7452-284b-b875666df60c"
UUID_B = "GPU-0a1b2c3d-0000-4000-8000-00000000000b"


def _values(text: str, name: str) -> dict:
    return {(s.labels["namespace"], s.labels["pod"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}


def _gpus(devices, context=None) -> dict:
    return {owner[:2]: value for owner, value in allocated_gpus(build_mapping(DEVICE_FORMS, devices, context=context).allocations, DEVICE_FORMS)
            .items()}


def test_whole_gpus_count_one_each_whatever_their_device_id_form():
    devices = [AllocatedDevice("ml", "two", "c", "nvidia.com/gpu", UUID),
               AllocatedDevice("ml", "two", "c", "nvidia.com/gpu", UUID_B),
               AllocatedDevice("ml", "index", "c", "nvidia.com/gpu", "3"),
               AllocatedDevice("ml", "gke", "c", "nvidia.com/gpu", "nvidia5")]
    assert _gpus(devices) == {("ml", "two"): 2.0, ("ml", "index"): 1.0, ("ml", "gke"): 1.0}


def test_time_slicing_replicas_split_their_gpu_and_add_up_to_one():
    devices = [AllocatedDevice("a", "p", "c", "nvidia.com/gpu", f"{UUID}::0"),
               AllocatedDevice("b", "q", "c", "nvidia.com/gpu", f"{UUID}::1"),
               AllocatedDevice("b", "q", "c", "nvidia.com/gpu", f"{UUID}::3"),  # one container, two replicas
               AllocatedDevice("g", "k", "c", "nvidia.com/gpu", "nvidia1/vgpu0"),
               AllocatedDevice("g", "l", "c", "nvidia.com/gpu", "nvidia1/vgpu1")]
    assert _gpus(devices) == pytest.approx({("a", "p"): 1 / 3, ("b", "q"): 2 / 3, ("g", "k"): 0.5, ("g", "l"): 0.5})


def test_mig_instances_count_their_share_of_the_gpus_memory_slices():
    devices = [AllocatedDevice("m", "small", "c", "nvidia.com/mig-1g.5gb", f"MIG-{UUID}/7/0"),
               AllocatedDevice("m", "half", "c", "nvidia.com/mig-3g.20gb", f"MIG-{UUID}/2/0"),
               AllocatedDevice("m", "four", "c", "nvidia.com/mig-4g.40gb", "MIG-0a1b2c3d-aaaa-bbbb-cccc-000000000001"),
               AllocatedDevice("m", "a30", "c", "nvidia.com/mig-2g.12gb", "MIG-0a1b2c3d-aaaa-bbbb-cccc-000000000002")]
    assert _gpus(devices) == {("m", "small"): 1 / 8, ("m", "half"): 0.5, ("m", "four"): 0.5, ("m", "a30"): 0.5}


def test_1g_10gb_counts_as_80gb_unless_the_node_shows_only_40gb_profiles():
    assert mig_share("1g.10gb") == 1 / 8  # an 80GB A100/H100's smallest profile
    assert mig_share("1g.10gb", ["1g.10gb", "3g.40gb"]) == 1 / 8
    assert mig_share("1g.10gb", ["1g.10gb", "2g.10gb", "1g.5gb"]) == 2 / 8  # a 40GB A100
    assert mig_share("5g.99gb") is None
    alone = [AllocatedDevice("m", "tiny", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID}/11/0")]
    assert _gpus(alone) == {("m", "tiny"): 1 / 8}
    on_a100_40 = alone + [AllocatedDevice("m", "big", "c", "nvidia.com/mig-3g.20gb", f"MIG-{UUID_B}/1/0")]
    assert _gpus(on_a100_40) == {("m", "tiny"): 2 / 8, ("m", "big"): 0.5}
    unknown = [AllocatedDevice("m", "odd", "c", "nvidia.com/mig-5g.99gb", f"MIG-{UUID}/1/0")]
    assert _gpus(unknown) == {}


def test_mig_without_a_profile_in_its_resource_name_is_unknown():
    devices = [AllocatedDevice("m", "single", "c", "nvidia.com/gpu", "MIG-0a1b2c3d-aaaa-bbbb-cccc-000000000003"),
               AllocatedDevice("m", "gke", "c", "nvidia.com/gpu", "nvidia0/gi3"),
               AllocatedDevice("m", "whole", "c", "nvidia.com/gpu", UUID)]
    assert _gpus(devices) == {("m", "whole"): 1.0}


def test_dra_devices_count_like_their_device_plugin_twins_and_shared_claims_split():
    key, mig_key = GpuKey("UUID", UUID, ""), GpuKey("UUID", UUID_B, "9")
    slices = StaticContext({"gpu-0": DraResolution(False, key, True),
                     "gpu-1-mig-9": DraResolution(False, mig_key, True, "3g.40gb")})
    devices = [AllocatedDevice("d", "whole", "c", "gpu.nvidia.com", "gpu-0", dra=True, claim="d/whole-gpu"),
               AllocatedDevice("d", "mig", "c", "gpu.nvidia.com", "gpu-1-mig-9", dra=True, claim="d/mig"),
               # two pods on one shared claim's device
               AllocatedDevice("d", "s1", "c", "gpu.nvidia.com", "gpu-7", dra=True, claim="d/shared"),
               AllocatedDevice("d", "s2", "c", "gpu.nvidia.com", "gpu-7", dra=True, claim="d/shared")]
    assert _gpus(devices, StaticContext({})) == {("d", "whole"): 1.0, ("d", "mig"): 1.0, ("d", "s1"): 0.5,
                                          ("d", "s2"): 0.5}  # no slice: gpu-1-mig-9 reads as a GPU by name
    assert _gpus(devices, slices) == {("d", "whole"): 1.0, ("d", "mig"): 0.5, ("d", "s1"): 0.5, ("d", "s2"): 0.5}


def test_the_series_render_after_allocation_info_with_claim_labels():
    devices = [AllocatedDevice("d", "trainer", "main", "gpu.nvidia.com", "gpu-0", dra=True,
                               claim="d/trainer-gpu-x7k2"),
               AllocatedDevice("ml", "rep", "c", "nvidia.com/gpu", f"{UUID_B}::0"),
               AllocatedDevice("ml", "rep2", "c", "nvidia.com/gpu", f"{UUID_B}::1"),
               AllocatedDevice("ml", "rep2", "c", "nvidia.com/gpu", f"{UUID_B}::2")]
    text = render_allocation_info(build_mapping(DEVICE_FORMS, devices), frozenset(), "kubernetes")
    assert ('pod_gpu_allocation_info{namespace="d",pod="trainer",container="main",resource="gpu.nvidia.com",'
            'device_id="gpu-0",resourceclaim_namespace="d",resourceclaim_name="trainer-gpu-x7k2"} 1') in text
    assert 'resourceclaim' not in text.split("pod=\"rep\"")[1].split("\n")[0]  # device plugin: no claim
    assert "# TYPE pod_gpu_container_allocated_gpus gauge" in text
    assert _values(text, "pod_gpu_container_allocated_gpus") == pytest.approx({
        ("d", "trainer"): 1.0, ("ml", "rep"): 1 / 3, ("ml", "rep2"): 2 / 3})
    assert 'pod_gpu_container_allocated_gpus{namespace="ml",pod="rep",container="c"} 0.333333333333\n' in text


# --- the replicas the kubelet offers (GetAllocatableResources) ------------------------------------------

def _replicas(gpu: str, count: int, resource: str = "nvidia.com/gpu"):
    return [(resource, f"{gpu}::{index}") for index in range(count)]


def test_a_replica_is_one_nth_of_a_gpu_offered_n_ways():
    held = [AllocatedDevice("a", "p", "c", "nvidia.com/gpu", f"{UUID}::0"),
            AllocatedDevice("b", "q", "c", "nvidia.com/gpu", f"{UUID}::2"),
            AllocatedDevice("b", "q", "c", "nvidia.com/gpu", f"{UUID}::3"),
            AllocatedDevice("g", "k", "c", "nvidia.com/gpu", "nvidia1/vgpu0")]
    offered = count_offered(_replicas(UUID, 4) + [("nvidia.com/gpu", UUID_B), ("nvidia.com/gpu", "nvidia1/vgpu0"),
                                                  ("nvidia.com/gpu", "nvidia1/vgpu1"), ("nvidia.com/gpu", "nvidia1/vgpu2")], DEVICE_FORMS)
    assert offered == {("nvidia.com/gpu", UUID): 4, ("nvidia.com/gpu", "nvidia1"): 3}  # whole GPUs: no entry
    mapping = build_mapping(DEVICE_FORMS, held, offered=offered)
    assert mapping.offered == offered and build_mapping(DEVICE_FORMS, held).offered is None
    totals = {owner[:2]: value for owner, value in allocated_gpus(mapping.allocations, DEVICE_FORMS, offered).items()}
    assert totals == pytest.approx({("a", "p"): 1 / 4, ("b", "q"): 2 / 4, ("g", "k"): 1 / 3})
    text = render_allocation_info(mapping, frozenset(), "kubernetes")
    assert _values(text, "pod_gpu_container_allocated_gpus") == pytest.approx(
        {("a", "p"): 0.25, ("b", "q"): 0.5, ("g", "k"): 1 / 3})


class Lister:
    """The kubelet's GetAllocatableResources as OfferedReplicas sees it: answers, or fails."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def __call__(self):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_offered_replicas_are_asked_only_when_replicas_are_held_and_then_once_a_minute():
    clock, lister = ManualClock(), Lister(_replicas(UUID, 4))
    offered = OfferedReplicas(lister, DEVICE_FORMS, clock=clock)
    whole = [AllocatedDevice("a", "p", "c", "nvidia.com/gpu", UUID_B)]
    assert offered(whole) is None and lister.calls == 0  # no shared GPU on the node: never asked
    shared = whole + [AllocatedDevice("a", "q", "c", "nvidia.com/gpu", f"{UUID}::1")]
    assert offered(shared) == {("nvidia.com/gpu", UUID): 4} and lister.calls == 1
    clock.now += MAX_AGE_SECONDS - 1
    assert offered(shared) == {("nvidia.com/gpu", UUID): 4} and lister.calls == 1
    lister.answer = _replicas(UUID, 4) + _replicas(UUID_B, 2)
    offered(shared + [AllocatedDevice("n", "new", "c", "nvidia.com/gpu", f"{UUID_B}::0")])  # a GPU not asked about
    assert lister.calls == 2
    clock.now += MAX_AGE_SECONDS
    offered(shared)
    assert lister.calls == 3


def test_a_kubelet_refusing_the_call_leaves_the_split_among_held_replicas(caplog):
    lister = Lister(KubeletError("kubelet socket /x: List failed with UNKNOWN: disabled", reason="error"))
    offered = OfferedReplicas(lister, DEVICE_FORMS, clock=ManualClock())
    held = [AllocatedDevice("a", "p", "c", "nvidia.com/gpu", f"{UUID}::0")]
    assert offered(held) is None and offered(held) is None
    assert lister.calls == 1  # not asked again on every refresh: once a minute, as when it answers
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1 == len(caplog.records)
    assert "GetAllocatableResources" in caplog.records[0].getMessage()  # logged once


def test_an_answer_lacking_a_held_gpu_is_not_asked_again_on_every_refresh():
    clock, lister = ManualClock(), Lister(_replicas(UUID_B, 2))  # the held replica's GPU is not listed
    offered = OfferedReplicas(lister, DEVICE_FORMS, clock=clock)
    held = [AllocatedDevice("a", "p", "c", "nvidia.com/gpu", f"{UUID}::0")]
    for _ in range(3):
        offered(held)
    assert lister.calls == 1
    clock.now += MAX_AGE_SECONDS
    offered(held)
    assert lister.calls == 2


def test_the_client_lists_what_the_kubelet_offers(kubelet):
    client = PodResourcesClient(KubeletOptions(kubelet.socket_path, timeout_seconds=5))
    with pytest.raises(KubeletError):  # the fake refuses it until told what is offered, as gated kubelets do
        client.list_offered()
    kubelet.set_allocatable(_replicas(UUID, 2) + [("nvidia.com/mig-1g.10gb", f"MIG-{UUID_B}/11/0")])
    assert sorted(client.list_offered()) == sorted(_replicas(UUID, 2) + [("nvidia.com/mig-1g.10gb",
                                                                          f"MIG-{UUID_B}/11/0")])
