"""The real exporter process reading bodies as dcgm-exporter HEAD writes them with its Kubernetes
options (-k, pod labels, pod UIDs, virtual GPUs, `Hostname` or `hostname`), with the Kubernetes API
on: one device-level series per owner, no label name twice, promtool and prometheus_client read all."""

from __future__ import annotations

import itertools
import re

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.dcgm_head_bodies import HeadOptions, HeadPod, head_body, samples_of
from support.fake_kube_api import write_kubeconfig
from support.fixtures import fixture_bytes
from support.kube_e2e import add_pod, scrape, start
from support.scrape_checks import L4, L4_UUID, assert_parses
from support.waiting import wait_until

FIXTURE = fixture_bytes(L4).decode()
LABELS = {"a": {"workload": "training", "app.kubernetes.io/name": "trainer"}, "b": {"team": "vision"}, "c": {}}
REPLICAS = {"a": (0, 1), "b": (2,), "c": (3,)}  # time-slicing replicas of the L4 each pod holds
FAMILIES = sorted({line.split("{")[0] for line in FIXTURE.splitlines() if line.startswith("DCGM_")})


@pytest.fixture
def head_node(kubelet, dcgm, api, socket_dir):
    """(kubelet, dcgm, kubeconfig, pod UIDs): pods a, b, c sharing the L4, known to the API."""
    uids = {pod: add_pod(api, "ml", pod, labels=LABELS[pod])["metadata"]["uid"] for pod in REPLICAS}
    kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4_UUID}::{replica}")
                         for pod, replicas in REPLICAS.items() for replica in replicas])
    pods = [HeadPod("ml", pod, "main", uids[pod], tuple(f"{L4_UUID}::{r}" for r in REPLICAS[pod]), LABELS[pod])
            for pod in REPLICAS]
    return kubelet, dcgm, write_kubeconfig(str(socket_dir / "kubeconfig"), api.url), uids, pods


def settled(exporter, uids):
    """A scrape once the API's pod UIDs are on every holder's samples."""
    return wait_until(lambda: (lambda text: text if all(f'pod_uid="{u}"' in text for u in uids.values()) else None)(
        scrape(exporter)))


@pytest.mark.parametrize("hostname", ["Hostname", "hostname"])
def test_virtual_gpu_copies_come_back_as_one_device_level_series_per_owner(head_node, run_exporter, hostname):
    kubelet, dcgm, kubeconfig, uids, pods = head_node
    rounds = itertools.count()

    def body() -> bytes:  # new device-level values on every request; each pod's own share beside them
        n = next(rounds)
        own = {uids["a"]: {"DCGM_FI_DEV_FB_USED": "5000", "DCGM_FI_DEV_GPU_UTIL": "40"},
               uids["b"]: {"DCGM_FI_DEV_FB_USED": "9000", "DCGM_FI_DEV_GPU_UTIL": "30"}}
        device = {"DCGM_FI_DEV_FB_USED": str(14000 + n), "DCGM_FI_DEV_GPU_UTIL": str(70 + n % 20)}
        options = HeadOptions(virtual_gpus=True, pod_uid=True, hostname=hostname)
        return head_body(FIXTURE, pods, options, own, device).encode()

    dcgm.body = body
    exporter = start(run_exporter, (kubelet, dcgm, kubeconfig), "--labels.extra", "pod_uid,workload")
    settled(exporter, uids)
    for _ in range(4):  # line by line, then the template refilled
        text = scrape(exporter)
        assert_parses(text)
        # The device's value for every holder, never a pod's own share (0, 5000, 9000).
        fb_used = {labels["pod"]: value for labels, value in samples_of(text, "DCGM_FI_DEV_FB_USED")}
        assert len(set(fb_used.values())) == 1 and int(next(iter(fb_used.values()))) >= 14000, fb_used
        for family in FAMILIES:
            samples = list(samples_of(text, family))
            assert sorted(labels["pod"] for labels, _ in samples) == ["a", "b", "c"], (family, samples)
            for labels, _ in samples:
                assert "vgpu" not in labels and hostname in labels, labels
                assert labels["pod_uid"] == uids[labels["pod"]] and labels["workload"] == labels["pod"], labels


@pytest.mark.parametrize("options,style", [
    (HeadOptions(pod_labels=True, pod_uid=True), "kubernetes"),
    (HeadOptions(pod_labels=True, pod_uid=True, old_namespace=True, hostname="Hostname"), "legacy"),
])
def test_pod_labels_and_uids_from_dcgm_exporter_give_way_to_ours(head_node, run_exporter, options, style):
    kubelet, dcgm, kubeconfig, uids, pods = head_node
    # dcgm-exporter -k --kubernetes-enable-pod-labels --kubernetes-enable-pod-uid: one pod per GPU (the
    # last listed, a), its labels unprefixed: pod a's `workload` label meets our `workload`.
    dcgm.body = head_body(FIXTURE, [pods[1], pods[0]], options).encode()
    assert b'workload="training"' in dcgm.body
    exporter = start(run_exporter, (kubelet, dcgm, kubeconfig), "--labels.extra", "pod_uid,workload",
                     "--labels.pod-labels", ".*", "--labels.style", style)
    text = settled(exporter, uids)
    assert_parses(text)
    pod_label = "pod" if style == "kubernetes" else "pod_name"
    for family in FAMILIES:
        samples = list(samples_of(text, family))
        assert sorted(labels[pod_label] for labels, _ in samples) == ["a", "b", "c"], (family, samples)
        for labels, _ in samples:
            pod = labels[pod_label]
            assert labels["workload_kind"] == "Pod" and labels["workload"] == pod, labels
            assert labels["pod_uid"] == uids[pod], labels
            assert labels.get("label_workload") == LABELS[pod].get("workload"), labels
    info = [line for line in text.splitlines() if line.startswith("pod_gpu_allocation_info")]
    assert len(info) == 4 and all(len(re.findall(r"[{,]workload=", line)) == 1 for line in info)
