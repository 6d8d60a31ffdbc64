"""Device-ID forms → the keys dcgm samples carry; the Mapping built from one kubelet List."""

from __future__ import annotations

import json

import pytest

from exporter.vendors.nvidia.device_ids import dra_mig_placement, is_gpu_device, key_for_device
from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import EMPTY_MAPPING, DraResolution, build_mapping
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.fixtures import fixture_bytes
from support.mapping_contexts import StaticContext

UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
MIG_UUID = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"




@pytest.mark.parametrize(
    "device_id, key",
    [
        (UUID, GpuKey("UUID", UUID, "")),
        (UUID + "::0", GpuKey("UUID", UUID, "")),  # time-slicing / MPS replica
        (UUID + "::17", GpuKey("UUID", UUID, "")),
        (UUID + "-3", GpuKey("UUID", UUID, "")),  # a HAMi replica, kubelet-only (the API follows its pod's annotation)
        ("0", GpuKey("gpu", "0", "")),  # DEVICE_ID_STRATEGY=index
        ("12", GpuKey("gpu", "12", "")),
        ("3::2", GpuKey("gpu", "3", "")),  # index strategy, time-sliced
        ("nvidia0", GpuKey("device", "nvidia0", "")),  # GKE
        ("nvidia5/vgpu3", GpuKey("device", "nvidia5", "")),  # GKE time sharing
        ("nvidia0/gi3", GpuKey("gpu", "0", "3")),  # GKE MIG
        ("nvidia1/gi13/vgpu0", GpuKey("gpu", "1", "13")),  # GKE MIG partition, time-shared
        (f"MIG-{UUID}/13/0", GpuKey("UUID", UUID, "13")),  # MIG, old drivers
        (f"MIG-{UUID}/7/0::1", GpuKey("UUID", UUID, "7")),
    ],
)
def test_device_plugin_forms(device_id, key):
    assert key_for_device(device_id) == key


@pytest.mark.parametrize(
    "device_id",
    [
        MIG_UUID,  # needs NVML
        MIG_UUID + "::1",
        "0:1",  # device plugin index strategy on MIG: a MIG index is not a GPU instance ID
        "MIG-GPU-be839661-c0f5-7452-284b-b875666df60c",  # seen in a real List answer; no instance named
        "nvidia0/gi",
        "GPU",
        "",
        "fpga0",
    ],
)
def test_forms_that_cannot_be_matched_without_guessing(device_id):
    assert key_for_device(device_id) is None


def test_dra_whole_gpus_match_the_device_label_and_mig_devices_stay_unresolved():
    assert key_for_device("gpu-0", dra=True) == GpuKey("device", "nvidia0", "")
    assert key_for_device("gpu-13", dra=True) == GpuKey("device", "nvidia13", "")
    assert key_for_device("gpu-0-mig-9-4-2", dra=True) is None
    assert key_for_device("gpu-vfio-0", dra=True) is None
    # A device-plugin form means nothing under DRA, and the reverse.
    assert key_for_device(UUID, dra=True) is None
    assert key_for_device("gpu-0") is None
    assert key_for_device("gpu-0-mig-1g12gb-19-0", dra=True) is None  # the 25.12 name: no instance ID either


@pytest.mark.parametrize("name, placement", [
    ("gpu-0-mig-1g12gb-19-0", (19, 0)),  # NVIDIA's DRA driver from 25.12: <profile>-<profile ID>-<start>
    ("gpu-3-mig-3g40gb-9-4", (9, 4)),
    ("gpu-12-mig-1g10gb-me-20-6", (20, 6)),  # "1g.10gb+me": dots dropped, "+" made a dash
    ("gpu-0-mig-19-0-1", None),  # before 25.12: <profile ID>-<start>-<size>, all digits (always with a uuid)
    ("gpu-0", None),
    ("gpu-0-mig-1g12gb-19", None),
])
def test_a_dra_mig_name_gives_its_placement_only_in_the_25_12_form(name, placement):
    assert dra_mig_placement(name) == placement


def test_mig_uuid_goes_to_the_resolver_and_only_it():
    asked = []

    def resolver(device_id):
        asked.append(device_id)
        return (UUID, "5") if device_id == MIG_UUID else None

    assert key_for_device(MIG_UUID + "::2", resolve_mig=resolver) == GpuKey("UUID", UUID, "5")
    assert key_for_device("MIG-aaaaaaaa-0000-0000-0000-000000000000", resolve_mig=resolver) is None
    for other in (UUID, "0", "nvidia0", "nvidia0/gi1", f"MIG-{UUID}/1/0", "0:1"):
        key_for_device(other, resolve_mig=resolver)
    assert asked == [MIG_UUID, "MIG-aaaaaaaa-0000-0000-0000-000000000000"]


@pytest.mark.parametrize(
    "resource, device_id, dra, counted",
    [
        ("nvidia.com/gpu", "0", False, True),
        ("nvidia.com/gpu", "anything", False, True),  # a GPU resource: unknown IDs are reported unresolved
        ("nvidia.com/gpu.shared", UUID + "::1", False, True),
        ("nvidia.com/mig-1g.10gb", MIG_UUID, False, True),
        ("nvidia.com/mig-3g.40gb.shared", "0:1::0", False, True),
        ("nvidia.com/a100", UUID, False, True),  # renamed in the device plugin's config
        ("nvidia.com/a100-mig", MIG_UUID, False, True),
        # NVIDIA network operator resources: RDMA shared devices are numbered like GPU indices.
        ("nvidia.com/rdma_shared_device_a", "0", False, False),
        ("nvidia.com/hostdev", "0000:3b:00.2", False, False),
        ("example.com/fpga", UUID, False, False),
        ("amd.com/gpu", "0", False, False),
        ("gpu.nvidia.com", "gpu-0", True, True),
        ("compute-domain.nvidia.com", "channel-0", True, False),
        ("nvidia.com/gpu", "gpu-0", True, False),  # DRA counts by driver name only
    ],
)
def test_which_devices_are_gpus(resource, device_id, dra, counted):
    assert is_gpu_device(resource, device_id, dra) is counted


def test_shared_gpu_owners_are_distinct_and_sorted_replicas_collapse():
    mapping = build_mapping(DEVICE_FORMS, [
        Device("team-b", "server", "main", "nvidia.com/gpu.shared", UUID + "::2"),
        Device("team-a", "server", "main", "nvidia.com/gpu.shared", UUID + "::0"),
        Device("team-a", "server", "main", "nvidia.com/gpu.shared", UUID + "::3"),
        Device("team-a", "server", "main", "nvidia.com/gpu.shared", UUID + "::3"),  # listed twice
        Device("team-a", "server", "sidecar", "nvidia.com/gpu.shared", UUID + "::4"),
    ])
    assert mapping.owners_for(GpuKey("UUID", UUID, "")) == (
        Owner("team-a", "server", "main"),
        Owner("team-a", "server", "sidecar"),
        Owner("team-b", "server", "main"),
    )
    # Every replica stays an allocation (its own device_id); the duplicate listing does not.
    assert [(a.owner.namespace, a.owner.container, a.device_id) for a in mapping.allocations] == [
        ("team-a", "main", UUID + "::0"),
        ("team-a", "main", UUID + "::3"),
        ("team-a", "sidecar", UUID + "::4"),
        ("team-b", "main", UUID + "::2"),
    ]
    assert mapping.unresolved == ()


def test_mapping_does_not_depend_on_list_order():
    devices = [
        Device("a", "p1", "c", "nvidia.com/gpu", "0"),
        Device("b", "p2", "c", "nvidia.com/gpu.shared", UUID + "::1"),
        Device("c", "p3", "c", "nvidia.com/gpu.shared", UUID + "::0"),
        Device("d", "p4", "c", "nvidia.com/mig-1g.10gb", MIG_UUID),
    ]
    assert build_mapping(DEVICE_FORMS, devices) == build_mapping(DEVICE_FORMS, list(reversed(devices)))


def test_unresolved_devices_are_listed_once_and_still_allocations():
    mapping = build_mapping(DEVICE_FORMS, [
        Device("ml", "a", "c", "nvidia.com/mig-1g.10gb", MIG_UUID),
        Device("ml", "b", "c", "nvidia.com/mig-1g.10gb", "0:1"),
        Device("ml", "c", "c", "gpu.nvidia.com", "gpu-0-mig-9-4-2", dra=True),
        Device("ml", "d", "c", "nvidia.com/rdma_shared_device_a", "0"),  # not a GPU: neither
    ])
    assert mapping.unresolved == ("0:1", MIG_UUID, "gpu-0-mig-9-4-2")
    assert [(a.owner.pod, a.key) for a in mapping.allocations] == [("a", None), ("b", None), ("c", None)]
    assert not mapping.owners


def test_resolver_makes_mig_uuid_an_instance_key():
    mapping = build_mapping(DEVICE_FORMS, [Device("ml", "a", "c", "nvidia.com/mig-1g.10gb", MIG_UUID)],
                            resolve_mig=lambda device_id: (UUID, "13"))
    assert mapping.owners_for(GpuKey("UUID", UUID, "13")) == (Owner("ml", "a", "c"),)
    assert mapping.unresolved == ()


def test_a_real_mig_node_list_answer():
    # The kubelet answer (JSON form) of a MIG node from an issue thread: one container holding the
    # whole GPU by UUID and "MIG-GPU-<uuid>" without instance numbers, which names no GPU instance.
    answer = json.loads(fixture_bytes("dcgm/podresources-list-response-mig.json"))
    devices = [
        Device(pod["namespace"], pod["name"], container["name"], held["resource_name"], device_id)
        for pod in answer["pod_resources"]
        for container in pod["containers"]
        for held in container["devices"]
        for device_id in held["device_ids"]
    ]
    mapping = build_mapping(DEVICE_FORMS, devices)
    owner = Owner("testing", "ollama-76f687f4cd-xcvvp", "ollama")
    assert mapping.owners == {GpuKey("UUID", "GPU-be839661-c0f5-7452-284b-b875666df60c", ""): (owner,)}
    assert mapping.unresolved == ("MIG-GPU-be839661-c0f5-7452-284b-b875666df60c",)
    assert len(mapping.allocations) == 2


def test_keys_of_gpu_level_and_instance_samples():
    assert GpuIdentity(UUID, "0", "nvidia0", "").keys() == (
        GpuKey("UUID", UUID, ""), GpuKey("gpu", "0", ""), GpuKey("device", "nvidia0", ""))
    assert GpuIdentity(UUID, "0", "nvidia0", "13").keys() == (
        GpuKey("UUID", UUID, "13"), GpuKey("gpu", "0", "13"), GpuKey("device", "nvidia0", "13"))
    assert GpuIdentity("", "1", "", "").keys() == (GpuKey("gpu", "1", ""),)  # legacy textfile: gpu and uuid only
    assert GpuIdentity("", "", "", "").keys() == ()


def test_every_form_meets_the_samples_of_its_gpu_and_no_other():
    """Each form's key is among the keys of the right sample and of no sample of another GPU/instance."""
    gpu0 = GpuIdentity(UUID, "0", "nvidia0", "").keys()
    gpu0_gi3 = GpuIdentity(UUID, "0", "nvidia0", "3").keys()
    gpu1 = GpuIdentity("GPU-other", "1", "nvidia1", "").keys()
    cases = {
        UUID + "::1": gpu0, "0": gpu0, "nvidia0/vgpu1": gpu0,
        "nvidia0/gi3": gpu0_gi3, f"MIG-{UUID}/3/0": gpu0_gi3,
    }
    for device_id, matching in cases.items():
        key = key_for_device(device_id)
        assert key in matching, device_id
        others = [keys for keys in (gpu0, gpu0_gi3, gpu1) if keys is not matching]
        assert all(key not in keys for keys in others), device_id
    assert key_for_device("gpu-0", dra=True) in gpu0


class Cluster(StaticContext):
    """A StaticContext that records what the mapping asked of it."""

    def __init__(self, resolutions=None, labels=None):
        super().__init__(resolutions, labels)
        self.asked_for_labels = None
        self.retained = None

    def extra_labels_for(self, pods):
        self.asked_for_labels = list(pods)
        return super().extra_labels_for(self.asked_for_labels)

    def retain_claims(self, devices):
        self.retained = [device.device_id for device in devices]


def test_the_cluster_context_keys_dra_devices_leaves_monitors_out_and_adds_labels():
    devices = [
        Device("ml", "train", "c", "gpu.nvidia.com", "gpu-0", dra=True),
        Device("ml", "small", "c", "gpu.nvidia.com", "gpu-1-mig-9-4-2", dra=True),
        Device("ml", "strange", "c", "gpu.nvidia.com", "gpu-2", dra=True),
        Device("monitoring", "dcgm", "c", "gpu.nvidia.com", "gpu-3", dra=True),
        Device("ml", "plugin", "c", "nvidia.com/gpu", UUID),
        Device("ml", "nic", "c", "nvidia.com/rdma_shared_device_a", "0"),
    ]
    cluster = Cluster(
        resolutions={"gpu-1-mig-9-4-2": DraResolution(False, GpuKey("UUID", UUID, "13"), True),
                     "gpu-2": DraResolution(False, None, True),  # a slice says: no sample is this device's
                     "gpu-3": DraResolution(True, None, False)},  # held through an adminAccess claim
        labels={("ml", "train"): (("workload", "train"),)})
    mapping = build_mapping(DEVICE_FORMS, iter(devices), context=cluster)  # any iterable: the context sees it too
    assert mapping.owners == {
        GpuKey("device", "nvidia0", ""): (Owner("ml", "train", "c"),),  # known to no slice: the name rule
        GpuKey("UUID", UUID, "13"): (Owner("ml", "small", "c"),),
        GpuKey("UUID", UUID, ""): (Owner("ml", "plugin", "c"),),
    }
    assert mapping.unresolved == ("gpu-2",) and "dcgm" not in {a.owner.pod for a in mapping.allocations}
    assert cluster.asked_for_labels == [("ml", "plugin"), ("ml", "small"), ("ml", "strange"), ("ml", "train")]
    assert mapping.extra_labels == {("ml", "train"): (("workload", "train"),)}
    assert cluster.retained == [device.device_id for device in devices]


def test_a_context_without_labels_builds_the_kubelet_only_mapping():
    devices = [Device("ml", "a", "c", "nvidia.com/gpu", UUID),
               Device("ml", "b", "c", "gpu.nvidia.com", "gpu-1", dra=True)]
    assert build_mapping(DEVICE_FORMS, devices, context=Cluster()) == build_mapping(DEVICE_FORMS, devices)


def test_empty_mapping_has_nothing():
    assert build_mapping(DEVICE_FORMS, []) == EMPTY_MAPPING
    assert EMPTY_MAPPING.owners_for(GpuKey("UUID", UUID, "")) == ()
