"""--labels.mode join and --labels.limit in the rewrite: which labels a sample keeps, in which order they go."""

from __future__ import annotations

import dataclasses
import re
import threading

from exporter.core.mapping import build_mapping
from exporter.exposition.allocation import render_allocation_info
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.rewriter import Rewriter
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device

UUID0 = "GPU-be839661-c0f5-7452-284b-b875666df60c"
UPSTREAM = f'gpu="0",UUID="{UUID0}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
EXTRAS = (("pod_uid", "u-1"), ("workload_kind", "Deployment"), ("workload", "web"),
          ("label_a", "1"), ("label_b", "2"), ("annotation_x", "free text"), ("annotation_y", "more"))


def _mapping(holders=("a",)):
    mapping = build_mapping(DEVICE_FORMS, [Device("ns", pod, "main", "nvidia.com/gpu.shared", f"{UUID0}::{index}")
                             for index, pod in enumerate(holders)])
    return dataclasses.replace(mapping, extra_labels={("ns", pod): EXTRAS for pod in holders})


def _names(line: str):
    return re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', line[line.index("{"):])


def test_extras_go_from_the_end_annotations_first_and_never_half_the_workload():
    limit = LabelLimit(14)
    assert limit.fit(EXTRAS, 8, 3) == EXTRAS[:3]  # room 3: pod_uid and the workload pair
    assert limit.fit(EXTRAS, 8, 3 + 2) == EXTRAS[:1]  # room 1: not workload_kind alone
    assert limit.fit(EXTRAS, 6, 3) == EXTRAS[:5]  # room 5: the pod labels stay, the annotations go
    assert limit.fit(EXTRAS, 12, 3) is None  # not even the owner labels fit
    assert limit.dropped == 4 + 6 + 2 + (7 + 3)
    assert LabelLimit(None).fit(EXTRAS, 100, 3) == EXTRAS and LabelLimit(14).fit(EXTRAS, 4, 3) == EXTRAS


def test_a_cut_is_counted_once_though_the_allocation_rows_are_rendered_on_every_scrape():
    limit = LabelLimit(10)
    first = render_allocation_info(_mapping(), [], "kubernetes", limit)
    counted = limit.dropped
    assert counted > 0
    for _ in range(3):  # three more scrapes of the same mapping
        assert render_allocation_info(_mapping(), [], "kubernetes", limit) == first
    assert limit.dropped == counted


def test_a_holder_that_stays_is_not_counted_again_however_many_come_and_go():
    limit = LabelLimit(12)
    held = (("pod_uid", "stays"), ("label_a", "1"), ("annotation_x", "t"))
    assert limit.fit(held, 8, 3) == held[:1]
    counted = limit.dropped
    for number in range(10_000):  # short-lived pods; every change of mapping asks for the one that stays
        limit.fit((("pod_uid", f"gone-{number}"), ("label_a", "1")), 8, 3)
        assert limit.fit(held, 8, 3) == held[:1]
    assert limit.dropped == counted + 10_000  # each short-lived pod's label_a, once; the stayer's never again


class _MeetingLimit(LabelLimit):
    """Holds each cut until a second thread is cutting too (or a second has passed): where two
    threads may both miss the remembered answers, they both cut, and the test sees it every time."""

    def __init__(self, limit):
        super().__init__(limit)
        self.meeting = threading.Barrier(2, timeout=1.0)

    def _fit(self, *args):
        try:
            self.meeting.wait()
        except threading.BrokenBarrierError:
            pass  # nobody else was cutting: the answer was remembered, or the lock kept them out
        return super()._fit(*args)


def test_a_cut_asked_for_on_two_threads_at_once_is_counted_once():
    limit = _MeetingLimit(12)
    held = (("pod_uid", "u"), ("label_a", "1"), ("annotation_x", "t"))
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(limit.fit(held, 8, 3))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [held[:1], held[:1]]
    assert limit.dropped == 2  # label_a and annotation_x, once


def test_samples_within_the_limit_and_unattributed_when_owners_cannot_fit():
    body = f"DCGM_FI_DEV_GPU_TEMP{{{UPSTREAM}}} 41\n".encode()
    limit = LabelLimit(12)
    text = Rewriter(_mapping(), limit=limit).rewrite(body).text.decode()
    assert _names(text) == ["gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod", "container",
                            "pod_uid", "workload_kind", "workload", "label_a"]
    wide = f'DCGM_FI_DEV_GPU_TEMP{{{UPSTREAM},a="1",b="2",c="3",d="4",e="5"}} 41\n'.encode()
    text = Rewriter(_mapping(), limit=limit).rewrite(wide).text.decode()
    assert 'pod="' not in text and len(_names(text)) == 10  # upstream's own 10 labels are never cut
    # An allocation row of a device no sample carries has 3 labels of its own (resource, device_id and the
    # UUID its device ID gives) and 3 owner labels: room for 4.
    info = render_allocation_info(_mapping(), [], "kubernetes", LabelLimit(10))
    row = next(line for line in info.splitlines() if line.startswith("pod_gpu_allocation_info"))
    assert len(_names(row)) == 10 and "label_a" in row and "label_b" not in row and "annotation_" not in row


def test_join_mode_serves_upstream_labels_only_and_collapses_upstream_per_pod_copies():
    # dcgm-exporter -k copies a shared GPU's samples per pod; join mode drops those owner labels
    # and keeps one series per device.
    body = (f'DCGM_FI_DEV_GPU_TEMP{{{UPSTREAM},namespace="ns",pod="a",container="main"}} 41\n'
            f'DCGM_FI_DEV_GPU_TEMP{{{UPSTREAM},namespace="ns",pod="b",container="main"}} 41\n').encode()
    samples = Rewriter(_mapping(("a", "b"))).rewrite(body).text.decode().splitlines()
    join = Rewriter(_mapping(("a", "b")), mode="join").rewrite(body)
    assert len(samples) == 2 and all("label_a" in line for line in samples)
    assert join.text.decode() == f"DCGM_FI_DEV_GPU_TEMP{{{UPSTREAM}}} 41\n" and join.malformed == 0
    assert join.identities  # the allocation rows still learn the GPU's UUID and index
