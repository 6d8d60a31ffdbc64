"""Bodies as dcgm-exporter HEAD writes them with -k, pod labels, pod UIDs and virtual GPUs: one series
per owner with the device-level value, no label name twice, every output read by the real parsers."""

from __future__ import annotations

import dataclasses
import re

import pytest

from exporter.core.mapping import build_mapping
from exporter.exposition.allocation import render_allocation_info
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.dcgm_head_bodies import HeadOptions, HeadPod, head_body, samples_of
from support.fixtures import fixture_bytes
from support.scrape_checks import L4, L4_UUID, assert_parses

FIXTURE = fixture_bytes(L4).decode()
DEVICE = {"DCGM_FI_DEV_FB_USED": "14000", "DCGM_FI_DEV_GPU_UTIL": "87"}
# Pod a holds two time-slicing replicas, b one, c one and runs nothing on the GPU.
PODS = [
    HeadPod("ml", "a", "main", "uid-a", (f"{L4_UUID}::0", f"{L4_UUID}::1"), {"workload": "training", "app": "a"}),
    HeadPod("ml", "b", "main", "uid-b", (f"{L4_UUID}::2",), {"team": "vision"}),
    HeadPod("ml", "c", "main", "uid-c", (f"{L4_UUID}::3",)),
]
OWN = {"uid-a": {"DCGM_FI_DEV_FB_USED": "5000", "DCGM_FI_DEV_GPU_UTIL": "50"},
       "uid-b": {"DCGM_FI_DEV_FB_USED": "9000", "DCGM_FI_DEV_GPU_UTIL": "37"}}
FAMILIES = sorted({name for name in re.findall(r"(?m)^(DCGM_\w+)\{", FIXTURE)})


def kubelet_mapping(extras=None):
    devices = [AllocatedDevice(p.namespace, p.pod, p.container, "nvidia.com/gpu", d) for p in PODS for d in p.device_ids]
    mapping = build_mapping(DEVICE_FORMS, devices)
    return dataclasses.replace(mapping, extra_labels=extras) if extras else mapping


def virtual_gpu_body(hostname="hostname", pod_uid=False) -> str:
    return head_body(FIXTURE, PODS, HeadOptions(virtual_gpus=True, pod_uid=pod_uid, hostname=hostname), OWN, DEVICE)


def copies_first(body: str) -> str:
    """The body with each family's samples in reverse: per-pod copies before the device-level sample,
    as a writer that sorts series would put them."""
    out, run = [], []
    for line in body.splitlines():
        if line.startswith("#") or not line:
            out += run[::-1] + [line]
            run = []
        else:
            run.append(line)
    return "\n".join(out + run[::-1]) + "\n"


def check_one_device_level_series_per_owner(text: str, hostname: str = "hostname") -> None:
    assert_parses(text)
    for family in FAMILIES:
        samples = list(samples_of(text, family))
        assert sorted(labels["pod"] for labels, _ in samples) == ["a", "b", "c"], (family, samples)
        fixture_value = next(value for _, value in samples_of(FIXTURE, family))
        for labels, value in samples:
            assert "vgpu" not in labels and "pod_uid" not in labels, labels
            assert hostname in labels
            assert value == DEVICE.get(family, fixture_value), (family, labels, value)


@pytest.mark.parametrize("hostname", ["hostname", "Hostname"])
@pytest.mark.parametrize("pod_uid", [False, True])
def test_virtual_gpu_copies_collapse_to_one_device_level_series_per_owner(hostname, pod_uid):
    body = virtual_gpu_body(hostname, pod_uid)
    # What the exporter is given: one copy per replica, and per-pod shares of FB_USED beside the device's.
    fb_used = [value for _, value in samples_of(body, "DCGM_FI_DEV_FB_USED")]
    assert sorted(fb_used) == ["0", "14000", "5000", "5000", "9000"]
    assert_parses(body)
    rewriter = Rewriter(kubelet_mapping())
    for _ in range(3):  # line by line, then from the template, then refilled
        result = rewriter.rewrite(body.encode())
        assert result.malformed == 0
        check_one_device_level_series_per_owner(result.text.decode(), hostname)
    assert rewriter.refills == 2  # the copies are fixed text of the template: the later bodies were refilled


def test_device_level_sample_wins_in_whatever_order_the_copies_come():
    body = copies_first(virtual_gpu_body())
    first = next(line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED"))
    assert 'pod="c"' in first and first.endswith(" 0")  # a per-pod copy comes first
    rewriter = Rewriter(kubelet_mapping())
    results = [rewriter.rewrite(body.encode()) for _ in range(3)]
    for result in results:
        assert result.malformed == 0
        check_one_device_level_series_per_owner(result.text.decode())
    assert rewriter.refills == 0  # such a body is rewritten line by line each time
    for slice_bytes in (1, 200, 4096, 1 << 20):
        streamed = rewrite_streamed(SeriesBuilder(kubelet_mapping()), body.encode(), slice_bytes)
        assert streamed.text == results[0].text, slice_bytes


def test_pod_labels_uids_and_old_names_from_dcgm_exporter_never_repeat_ours():
    # dcgm-exporter -k --kubernetes-enable-pod-labels --kubernetes-enable-pod-uid: pod label keys
    # unprefixed, so pod a's `workload` label meets the exporter's own `workload`.
    extras = {("ml", pod): (("pod_uid", f"ours-{pod}"), ("workload_kind", "Deployment"), ("workload", f"w-{pod}"),
                            ("label_app", "ours")) for pod in "abc"}
    for options in (HeadOptions(pod_labels=True, pod_uid=True), HeadOptions(pod_labels=True, hostname="Hostname"),
                    HeadOptions(pod_labels=True, pod_uid=True, old_namespace=True)):
        body = head_body(FIXTURE, PODS[:1], options)
        assert 'workload="training"' in body and 'app="a"' in body
        for style in ("kubernetes", "legacy"):
            mapping = kubelet_mapping(extras)
            result = Rewriter(mapping, style).rewrite(body.encode())
            assert result.malformed == 0
            text = result.text.decode()
            assert_parses(text + render_allocation_info(mapping, result.identities, style))
            for family in FAMILIES:
                samples = list(samples_of(text, family))
                assert len(samples) == 3, (family, samples)  # the kubelet's three holders, not dcgm's one
                for labels, _ in samples:
                    pod = labels["pod" if style == "kubernetes" else "pod_name"]
                    assert labels["workload"] == f"w-{pod}" and labels["pod_uid"] == f"ours-{pod}", labels
                    assert labels["app"] == "a"  # dcgm's pod labels that no name of ours meets pass as they came


def test_a_pod_label_named_like_a_dcgm_label_is_dcgm_exporters_own_duplicate_dropped_and_counted():
    # dcgm-exporter adds pod labels without checking its fixed labels: a pod label `gpu` gives the
    # sample `gpu` twice. Such lines are malformed upstream; they are dropped and counted.
    pod = PODS[0]._replace(labels={"gpu": "a100"})
    body = head_body(FIXTURE, [pod], HeadOptions(pod_labels=True))
    bad = [line for line in body.splitlines() if line.count('gpu="') == 2]
    assert bad
    result = Rewriter(kubelet_mapping()).rewrite(body.encode())
    assert result.malformed == len(bad)
    assert_parses(result.text.decode())

