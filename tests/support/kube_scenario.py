"""A node for the Kubernetes API tests: the H100 MIG scrape, a kubelet holding several device forms, pods."""

from __future__ import annotations

import re

from exporter.sources.kubelet import AllocatedDevice

H100 = "dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom"
UUID0 = "GPU-be839661-c0f5-7452-284b-b875666df60c"  # MIG mode, instances 11 and 13
UUID1 = "GPU-21c6d9d7-46cd-7e91-99c3-7b6a06a3faea"
UUID3 = "GPU-5d9cc71f-b438-dc00-707d-c6c12bcfede1"  # reported as gpu="2", device="nvidia2"
NODE = "gpu-node-1"
POOL = NODE  # NVIDIA's DRA driver names its pool after the node


def devices():
    """What the kubelet reports; the DRA device's name does not follow gpu-<minor>, so only its
    ResourceSlice tells which GPU it is."""
    return [
        AllocatedDevice("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
        AllocatedDevice("web", "infer-1", "vllm", "nvidia.com/gpu.shared", UUID1 + "::0"),
        AllocatedDevice("web", "infer-2", "vllm", "nvidia.com/gpu.shared", UUID1 + "::1"),
        AllocatedDevice("batch", "train-x7k2p", "main", "gpu.nvidia.com", "gpu-h100-a", dra=True,
                        claim="batch/train-gpu", pool=POOL),
    ]


def status_free(text: str) -> str:
    """The scrape without the two gauges whose values move between scrapes."""
    return re.sub(r"(?m)^(pod_gpu_exporter_(?:scrape_duration|mapping_age)_seconds) .*$", r"\1 X", text)


def resource_slice(devices_by_name):
    """This node's ResourceSlice of NVIDIA's DRA driver: device name → its string attributes."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-gpu.nvidia.com-abcde"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE, "pool": {"name": POOL, "generation": 1,
                     "resourceSliceCount": 1},
                     "devices": [{"name": name, "attributes": {key: {"string": value} for key, value in attrs.items()}}
                                 for name, attrs in devices_by_name.items()]}}


def claim(namespace, name, device, admin=False):
    """A ResourceClaim allocated one device of this node's pool (through adminAccess with `admin`)."""
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": POOL, "device": device}
    if admin:
        result["adminAccess"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def extended_resource_claim(pod: dict, name: str, devices_by_request: dict) -> dict:
    """The ResourceClaim the scheduler makes for a pod whose `nvidia.com/gpu` requests a DRA DeviceClass meets
    (KEP-5004): owned by the pod, annotated, one request per container's extended resource, allocated one
    device of this node's pool per request (request name → device name)."""
    meta = pod["metadata"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": meta["namespace"], "generateName": f"{meta['name']}-extended-resources-",
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"devices": {"requests": [
                {"name": request, "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                              "count": 1}} for request in devices_by_request]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": request, "driver": "gpu.nvidia.com", "pool": POOL, "device": device}
                for request, device in devices_by_request.items()]}},
                "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}}


def with_extended_resource_claim(pod: dict, name: str, mappings) -> dict:
    """The pod with the status.extendedResourceClaimStatus the scheduler writes: `mappings` are
    (container, resource name, request name)."""
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": name,
        "requestMappings": [{"containerName": container, "resourceName": resource, "requestName": request}
                            for container, resource, request in mappings]}
    return pod
