"""pod_gpu_container_allocated_gpus on an AMD node: 1 per whole GPU, 1/N per partition of a GPU sysfs shows split
into N (the first partition, named by its GPU's PCI address, included), under `mixed` or `single` resource names;
where sysfs does not show a device, only what its resource name says, else nothing."""

from __future__ import annotations

import dataclasses

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_node import HOLDERS, allocations, demo_gpus
from support.amd_node import AmdNode, samples
from support.kube_e2e import gauge
from support.waiting import wait_until


def _single_names():
    """The demo's held GPUs as `--resource_naming_strategy single` names them: all under amd.com/gpu."""
    return [dataclasses.replace(d, resource="amd.com/gpu") if d.resource.startswith("amd.com/") and
            d.resource != "amd.com/nic" else d for d in allocations()]


def _expected(shares_known) -> dict:
    """pod → the GPUs it holds, each held device counting `shares_known(gpu)` (None: not counted)."""
    totals: dict = {}
    for gpu in demo_gpus():
        share = shares_known(gpu) if gpu.gpu_id in HOLDERS else None
        if share is not None:
            pod = HOLDERS[gpu.gpu_id][1]
            totals[pod] = totals.get(pod, 0.0) + share
    return totals


def _allocated(amd: AmdNode) -> dict:
    """pod → pod_gpu_container_allocated_gpus, once the identity service has answered and the mapping used it."""
    def read():
        text = requests.get(amd.exporter.url(), timeout=10).text
        ready = gauge(text, "pod_gpu_exporter_amd_identity_up") == "1" and 'gpu_id="0",gpu_partition_id="0"' in text \
            and 'pod="trainer-amd-0"' in text
        return text if ready else ""
    text = wait_until(read, 15)
    return {labels["pod"]: float(value) for name, labels, value in samples(text)
            if name == "pod_gpu_container_allocated_gpus"}


@pytest.mark.parametrize("devices", [allocations, _single_names], ids=["mixed", "single"])
def test_a_partition_counts_as_its_share_of_the_gpu_sysfs_shows_split(amd_node, devices):
    amd = amd_node()
    amd.hold(devices())
    amd.serve()
    # The CPX GPU is split into eight: each of its partitions is 1/8, the first (named by the GPU's address) too.
    expected = _expected(lambda gpu: 1 / 8 if gpu.partitioned else 1.0)
    assert expected["embed-0"] == 0.125 and expected["trainer-amd-0"] == 2.0
    assert _allocated(amd) == pytest.approx(expected)


def test_without_sysfs_only_what_a_resource_name_says_is_counted(amd_node):
    amd = amd_node(specs=[])
    idle = next(gpu for gpu in demo_gpus() if gpu.gpu_id not in HOLDERS and not gpu.partitioned)
    amd.hold(allocations() + [AllocatedDevice("ml-team", "single-named", "main", "amd.com/gpu", idle.device_id)])
    amd.serve()
    # amd.com/spx_nps1 says its GPU is whole. amd.com/cpx_nps1 does not say into how many a GPU is split (that is
    # the model's), and amd.com/gpu may name a first partition: neither is counted, as an unknown MIG share is not.
    expected = _expected(lambda gpu: None if gpu.partitioned else 1.0)
    assert "embed-0" not in expected and "single-named" not in expected
    assert _allocated(amd) == pytest.approx(expected)
