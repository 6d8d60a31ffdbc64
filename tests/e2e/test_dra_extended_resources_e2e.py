"""DRA extended resources (KEP-5004) with the real exporter process: a pod's plain `nvidia.com/gpu` requests
met by NVIDIA's DRA driver. The scheduler makes one claim for the pod and records in the pod's status which
of its requests each container's GPUs became; the kubelet lists the whole claim, both GPUs, under each
container. Each container owns only the devices of its own requests."""

from __future__ import annotations

import re

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.fake_kube_api import make_pod
from support.kube_e2e import gauge, lines_of, scrape, start
from support.kube_scenario import (POOL, extended_resource_claim, resource_slice,
                                   with_extended_resource_claim)
from support.waiting import wait_until

UUID4 = "GPU-c4c7f4f8-af86-6966-c0b2-7c1e40c18347"  # gpu="4", device="nvidia4" in the H100 scrape
UUID5 = "GPU-7845680c-0e07-1670-c2bb-9f018cd7864b"  # gpu="5", device="nvidia5"
CLAIM = "train-0-extended-resources-x7k2q"
MAPPINGS = (("a", "nvidia.com/gpu", "container-0-request-0"), ("b", "nvidia.com/gpu", "container-1-request-0"))


def extended_resource_node(api, kubelet, mappings=MAPPINGS):
    """Pod ml/train-0: containers a and b ask for one nvidia.com/gpu each; the scheduler met both through one
    claim, a's request with gpu-4 and b's with gpu-5. The kubelet lists both GPUs under both containers."""
    api.put("resource.k8s.io/v1", "resourceslices", resource_slice({
        "gpu-4": {"type": "gpu", "uuid": UUID4}, "gpu-5": {"type": "gpu", "uuid": UUID5}}))
    pod = make_pod("ml", "train-0", "gpu-node-1", containers=("a", "b"))
    api.put("resource.k8s.io/v1", "resourceclaims", extended_resource_claim(
        pod, CLAIM, {"container-0-request-0": "gpu-4", "container-1-request-0": "gpu-5"}))
    api.put("v1", "pods", with_extended_resource_claim(pod, CLAIM, mappings))
    kubelet.set_devices([AllocatedDevice("ml", "train-0", container, "gpu.nvidia.com", device, dra=True,
                                         claim=f"ml/{CLAIM}", pool=POOL)
                         for container in ("a", "b") for device in ("gpu-4", "gpu-5")])


def samples_of(text: str, container: str):
    return [line for line in lines_of(text, "train-0") if line.startswith("DCGM_") and f'container="{container}"' in line]


def allocated(text: str, container: str) -> float:
    match = re.search(rf'(?m)^pod_gpu_container_allocated_gpus{{namespace="ml",pod="train-0",container="{container}"}} (\S+)$',
                      text)
    return float(match.group(1)) if match else 0.0


def allocation_rows(text: str, container: str):
    return [line for line in lines_of(text, "train-0")
            if line.startswith("pod_gpu_allocation_info") and f'container="{container}"' in line]


def test_each_container_owns_only_the_devices_of_its_own_requests(node, api, run_exporter):
    kubelet = node[0]
    extended_resource_node(api, kubelet)
    exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if len(allocation_rows(t, "a")) == 1 else None)(scrape(exporter)))
    for container, mine, theirs in (("a", UUID4, UUID5), ("b", UUID5, UUID4)):
        held = samples_of(text, container)
        assert held and all(f'UUID="{mine}"' in line for line in held), (container, held)
        assert not any(f'UUID="{theirs}"' in line for line in held)
        rows = allocation_rows(text, container)
        assert len(rows) == 1 and f'resource="nvidia.com/gpu"' in rows[0] and f'UUID="{mine}"' in rows[0], rows
        assert f'resourceclaim_name="{CLAIM}"' in rows[0]
        assert allocated(text, container) == 1.0
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"


@pytest.mark.parametrize("why", ["api_off", "claim_unreadable", "pod_status_without_mappings"])
def test_a_split_that_cannot_be_known_shares_each_gpu_and_counts_it_once(node, api, run_exporter, why):
    """The safe answer: the kubelet's listing, each GPU held by every container it is listed under, its one
    GPU split evenly among them: the pod's allocated GPUs add up to the devices it holds, never more."""
    kubelet, dcgm, _ = node
    extended_resource_node(api, kubelet, mappings=() if why == "pod_status_without_mappings" else MAPPINGS)
    if why == "claim_unreadable":
        api.forbidden["resourceclaims"] = "get"
    if why == "api_off":
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                                 "--kubernetes.api", "off", "--kubelet.refresh-interval", "200ms"])
    else:
        exporter = start(run_exporter, node)
    text = wait_until(lambda: (lambda t: t if 'UUID="' in "".join(allocation_rows(t, "b")) else None)(scrape(exporter)))
    for container in ("a", "b"):
        assert {re.search(r'UUID="([^"]+)"', line).group(1) for line in allocation_rows(text, container)} == {UUID4, UUID5}
        assert allocated(text, container) == 1.0  # half of each of the two GPUs
    assert allocated(text, "a") + allocated(text, "b") == 2.0
