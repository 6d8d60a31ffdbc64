"""Device health from pod status and DRA taints from ResourceSlices: decoding (each API version), matching
pod status entries to held devices in every device-ID form, and the series written."""

from __future__ import annotations

import json

import pytest

from exporter.core.health import DeviceHealth, DeviceTaint, ResourceHealth, device_health, resource_ids
from exporter.core.identity import GpuIdentity, GpuKey
from exporter.core.mapping import DeviceLike, Mapping, build_mapping
from exporter.collectors.kubernetes.health_section import render_device_health
from exporter.sources.kubelet import AllocatedDevice
from exporter.collectors.kubernetes.dra import DraDevices, slice_devices
from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.pod_store import pod_info
from exporter.collectors.kubernetes.stream import decode_object
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.fake_kube_api import make_pod

GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
MIG_A = "MIG-0b1c2d3e-4f50-5162-a3b4-c5d6e7f80912"
CDI = "k8s.gpu.nvidia.com/claim=0e9f-gpu-0"
TAINTS = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"},
          {"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
          {"key": "example.com/drain", "value": "soon", "effect": "Evict"}]  # an effect this API does not know


def _slice(version: str, taints=TAINTS, uuid: str = GPU_A) -> object:
    """A ResourceSlice in `version`'s shape (v1beta1 nests a device's fields under `basic`), decoded by lightkube."""
    fields = {"attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}}, "taints": taints}
    device = {"name": "gpu-0", **({"basic": fields} if version == "v1beta1" else fields)}
    published = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice", "metadata": {"name": "s"},
                 "spec": {"driver": "gpu.nvidia.com", "nodeName": "n", "pool": {"name": "n", "generation": 1,
                          "resourceSliceCount": 1}, "devices": [device]}}
    module = __import__(f"lightkube.resources.resource_{version}", fromlist=["ResourceSlice"])
    return decode_object(json.dumps(published).encode(), module.ResourceSlice)


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_slice_taints_are_read_in_every_api_version_and_an_unknown_effect_as_none(version):
    """The API: "Consumers must treat unknown effects like None" (an effect a newer API adds, or none)."""
    dra = DraDevices(lambda namespace, name: None, forms=DEVICE_FORMS)
    dra.replace([_slice(version)])
    key = GpuKey("UUID", GPU_A, "")
    assert dra.taints() == (DeviceTaint(key, "example.com/drain", "soon", "None"),
                            DeviceTaint(key, "gpu.nvidia.com/unmonitored", "", "None"),
                            DeviceTaint(key, "gpu.nvidia.com/xid", "79", "NoSchedule"))


def test_an_untainted_slice_and_a_mig_device_without_nvml_give_no_taint():
    assert slice_devices(_slice("v1", taints=None))[("gpu.nvidia.com", "n", "gpu-0")].taints == ()
    dra = DraDevices(lambda namespace, name: None, forms=DEVICE_FORMS)
    dra.replace([_slice("v1", uuid=MIG_A)])
    assert dra.taints() == ()  # its GPU instance is NVML's to tell; never guessed
    dra.resolve_mig = {MIG_A: (GPU_B, "13")}.get
    assert {taint.key for taint in dra.taints()} == {GpuKey("UUID", GPU_B, "13")}


def test_pod_info_keeps_each_containers_allocated_resources_status():
    pod = make_pod("ml", "p", "n", containers=("main", "side"))
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": GPU_A, "health": "Unhealthy"},
                                                 {"resourceID": GPU_B, "health": "Healthy"}]},
        {"name": "claim:train/gpu", "resources": [{"resourceID": CDI, "health": "Unknown", "message": "no health"}]}]
    from lightkube.resources.core_v1 import Pod

    info = pod_info(decode_object(json.dumps(pod).encode(), Pod), LabelSpec())
    assert info.resource_health == (ResourceHealth("main", "nvidia.com/gpu", GPU_A, "Unhealthy"),
                                    ResourceHealth("main", "nvidia.com/gpu", GPU_B, "Healthy"),
                                    ResourceHealth("main", "claim:train/gpu", CDI, "Unknown"))
    assert pod_info(decode_object(json.dumps(make_pod("ml", "q", "n")).encode(), Pod), LabelSpec()).resource_health == ()


class _Context:
    """A MappingContext with pod status entries and taints; DRA devices resolved by their name rule."""

    def __init__(self, reports, taints=()):
        self.reports, self.taints = reports, taints

    def resolve_dra(self, device):
        from exporter.core.mapping import DraResolution

        return DraResolution(False, None, False)

    def extra_labels_for(self, pods):
        return {}

    def retain_claims(self, devices):
        pass

    def ended_pods(self, pods):
        return set()

    def resource_health_for(self, pods):
        return {pod: self.reports[pod] for pod in pods if pod in self.reports}

    def device_taints(self):
        return self.taints

    def hami_assignments(self, pods):
        return {}


DEVICES = [
    AllocatedDevice("ml", "a", "main", "nvidia.com/gpu.shared", GPU_A + "::0"),
    AllocatedDevice("ml", "b", "main", "nvidia.com/gpu.shared", GPU_A + "::1"),
    AllocatedDevice("ml", "c", "main", "nvidia.com/gpu", "3"),
    AllocatedDevice("ml", "d", "main", "nvidia.com/mig-1g.10gb", f"MIG-{GPU_B}/13/0"),
    AllocatedDevice("dra", "e", "main", "gpu.nvidia.com", "gpu-0", dra=True, claim="dra/train", pool="n", cdi_id=CDI),
    AllocatedDevice("dra", "f", "main", "gpu.nvidia.com", "gpu-1", dra=True, claim="dra/eval", pool="n"),
    AllocatedDevice("ml", "g", "main", "nvidia.com/gpu", "4"),  # no status reported: unknown
]
REPORTS = {
    ("ml", "a"): (ResourceHealth("main", "nvidia.com/gpu.shared", GPU_A + "::0", "Healthy"),
                  # a device it does not hold, and one under another container's name: neither counts
                  ResourceHealth("main", "nvidia.com/gpu", "4", "Unhealthy"),
                  ResourceHealth("side", "nvidia.com/gpu.shared", GPU_A + "::1", "Unhealthy")),
    ("ml", "b"): (ResourceHealth("main", "nvidia.com/gpu.shared", GPU_A + "::1", "Unhealthy"),),
    ("ml", "c"): (ResourceHealth("main", "nvidia.com/gpu", "3", "Healthy"),),
    ("ml", "d"): (ResourceHealth("main", "nvidia.com/mig-1g.10gb", f"MIG-{GPU_B}/13/0", "Healthy"),),
    ("dra", "e"): (ResourceHealth("main", "claim:train/gpu", CDI, "Unknown"),),
    ("dra", "f"): (ResourceHealth("main", "claim:eval", "gpu.nvidia.com/n/gpu-1", "Healthy"),),
}


@pytest.mark.parametrize("kind", [AllocatedDevice, Device])
def test_every_kubelet_device_kind_names_a_dra_device_by_its_cdi_id_as_the_protocol_says(kind):
    device = kind("dra", "e", "main", "gpu.nvidia.com", "gpu-0", dra=True, claim="dra/train", pool="n", cdi_id=CDI)
    assert all(hasattr(device, field) for field in DeviceLike.__annotations__)
    assert resource_ids(device) == ("gpu.nvidia.com/n/gpu-0", CDI)
    assert resource_ids(kind("ml", "c", "main", "nvidia.com/gpu", "3")) == ("3",)


def test_each_held_device_gets_its_holders_health_in_every_device_id_form():
    mapping = build_mapping(DEVICE_FORMS, DEVICES, context=_Context(REPORTS))
    assert mapping.device_health.statuses == {
        GpuKey("UUID", GPU_A, ""): "unhealthy",  # two replicas' holders disagree: unhealthy wins
        GpuKey("gpu", "3", ""): "healthy",
        GpuKey("UUID", GPU_B, "13"): "healthy",
        GpuKey("device", "nvidia0", ""): "unknown",  # DRA, named by its CDI ID
        GpuKey("device", "nvidia1", ""): "healthy",  # DRA, named <driver>/<pool>/<device>
        GpuKey("gpu", "4", ""): "unknown",  # its holder's pod status says nothing of it
    }


def test_a_known_answer_beats_unknown_and_anything_else_reads_unknown():
    devices = DEVICES[:2]
    reports = {("ml", "a"): (ResourceHealth("main", "nvidia.com/gpu.shared", GPU_A + "::0", "Unknown"),),
               ("ml", "b"): (ResourceHealth("main", "nvidia.com/gpu.shared", GPU_A + "::1", "Healthy"),)}
    allocations = build_mapping(DEVICE_FORMS, devices).allocations
    assert device_health(devices, allocations, reports) == {GpuKey("UUID", GPU_A, ""): "healthy"}
    odd = {("ml", "a"): (ResourceHealth("main", "nvidia.com/gpu.shared", GPU_A + "::0", "Degraded"),)}
    assert device_health(devices, allocations, odd) == {GpuKey("UUID", GPU_A, ""): "unknown"}


def test_health_and_taints_are_written_with_the_identities_the_samples_carried():
    taint = DeviceTaint(GpuKey("UUID", GPU_B, "13"), "gpu.nvidia.com/xid", "79", "NoSchedule")
    mapping = Mapping(device_health=DeviceHealth(
        {GpuKey("gpu", "3", ""): "healthy", GpuKey("UUID", GPU_A, ""): "unhealthy"}, (taint,)))
    identities = [GpuIdentity(GPU_A, "0", "nvidia0", ""), GpuIdentity("GPU-c", "3", "nvidia3", ""),
                  GpuIdentity(GPU_B, "1", "nvidia1", "13")]
    lines = render_device_health(mapping, identities).splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        f'pod_gpu_device_health_status{{UUID="{GPU_A}",gpu="0",status="unhealthy"}} 1',
        'pod_gpu_device_health_status{UUID="GPU-c",gpu="3",status="healthy"} 1',
        f'pod_gpu_device_taint{{UUID="{GPU_B}",gpu="1",GPU_I_ID="13",key="gpu.nvidia.com/xid",value="79",'
        'effect="NoSchedule"} 1']
    # No sample carried them (dcgm-exporter down, a GPU fallen off the bus): the name the key gives.
    assert render_device_health(mapping, []).splitlines()[2:4] == [
        f'pod_gpu_device_health_status{{UUID="{GPU_A}",status="unhealthy"}} 1',
        'pod_gpu_device_health_status{gpu="3",status="healthy"} 1']
    assert render_device_health(Mapping(), identities) == ""


# --- review findings: one name for an unsampled device, older models, unknown for a silent pod status --------

def test_an_unsampled_device_is_named_alike_on_its_allocation_row_and_its_health_row():
    from exporter.exposition.allocation import render_allocation_info

    devices = [AllocatedDevice("ml", "u", "main", "nvidia.com/gpu", GPU_A),  # keyed by UUID
               AllocatedDevice("ml", "i", "main", "nvidia.com/gpu", "3"),  # keyed by index
               AllocatedDevice("dra", "n", "main", "gpu.nvidia.com", "gpu-0", dra=True, claim="dra/x", pool="n"),
               AllocatedDevice("dra", "m", "main", "gpu.nvidia.com", "gpu-1", dra=True, claim="dra/y", pool="n")]
    reports = {("ml", "u"): (ResourceHealth("main", "nvidia.com/gpu", GPU_A, "Unhealthy"),),
               ("ml", "i"): (ResourceHealth("main", "nvidia.com/gpu", "3", "Unhealthy"),),
               ("dra", "n"): (ResourceHealth("main", "claim:x", "gpu.nvidia.com/n/gpu-0", "Unhealthy"),),
               ("dra", "m"): (ResourceHealth("main", "claim:y", "gpu.nvidia.com/n/gpu-1", "Unhealthy"),)}
    mapping = build_mapping(DEVICE_FORMS, devices, context=_Context(reports))
    # No sample carried any of them (dcgm-exporter down): each row names its device by what its key gives.
    rows = [line for line in render_allocation_info(mapping, [], "kubernetes").splitlines()
            if line.startswith("pod_gpu_allocation_info{")]
    assert [row.split("device_id=")[1] for row in rows] == [
        '"gpu-1",resourceclaim_namespace="dra",resourceclaim_name="y"} 1',  # nvidia1: no UUID or gpu to give
        '"gpu-0",resourceclaim_namespace="dra",resourceclaim_name="x"} 1',
        '"3",gpu="3"} 1',
        f'"{GPU_A}",UUID="{GPU_A}"}} 1']
    # The health rows carry the same names; a device with neither has no row (two would be one series).
    assert [line for line in render_device_health(mapping, []).splitlines() if not line.startswith("#")] == [
        f'pod_gpu_device_health_status{{UUID="{GPU_A}",status="unhealthy"}} 1',
        'pod_gpu_device_health_status{gpu="3",status="unhealthy"} 1']


def test_pod_info_reads_models_older_than_the_health_fields():
    """lightkube-models from before Kubernetes 1.31 have no allocatedResourcesStatus on a container's status,
    and the first ones that do may lack `health` on its resources: such a pod is read, without health."""
    from types import SimpleNamespace

    from lightkube.resources.core_v1 import Pod

    def older(model, missing: str):
        """The model as an older lightkube-models decodes it: every field of this one but `missing`."""
        return SimpleNamespace(**{name: getattr(model, name) for name in model.__struct_fields__ if name != missing})

    pod = make_pod("ml", "p", "n", containers=("main",))
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": GPU_A, "health": "Unhealthy"}]}]
    decoded = decode_object(json.dumps(pod).encode(), Pod)
    status = decoded.status.containerStatuses[0]
    decoded.status.containerStatuses = [older(status, "allocatedResourcesStatus")]
    info = pod_info(decoded, LabelSpec())
    assert info.resource_health == () and info.containers == (("main", status.containerID),)
    # A resource entry without `health`: read as no answer (unknown), not an error.
    entry = status.allocatedResourcesStatus[0]
    entry.resources = [older(entry.resources[0], "health")]
    decoded.status.containerStatuses = [status]
    assert pod_info(decoded, LabelSpec()).resource_health == (ResourceHealth("main", "nvidia.com/gpu", GPU_A, ""),)


def test_every_held_device_gets_a_status_unknown_when_its_holders_pod_status_says_nothing():
    devices = [AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", "3"),
               AllocatedDevice("ml", "q", "main", "nvidia.com/gpu", "4"),  # its pod status has no entry
               AllocatedDevice("ml", "r", "main", "nvidia.com/gpu", "5")]  # its pod is not in the store yet
    reports = {("ml", "a"): (ResourceHealth("main", "nvidia.com/gpu", "3", "Healthy"),), ("ml", "q"): ()}
    allocations = build_mapping(DEVICE_FORMS, devices).allocations
    assert device_health(devices, allocations, reports) == {
        GpuKey("gpu", "3", ""): "healthy", GpuKey("gpu", "4", ""): "unknown", GpuKey("gpu", "5", ""): "unknown"}
    # Without a fresh pod store (the API off, the watch failing too long) nothing is known: no series at all.
    assert device_health(devices, allocations, None) == {}
