"""--labels.limit and --labels.mode against the real exporter, the fake API server and the scenario node."""

from __future__ import annotations

import dataclasses
import re

import requests

from exporter.sources.kubelet import AllocatedDevice
from support.kube_e2e import add_pod, scrape, start
from support.kube_scenario import UUID1
from support.scrape_checks import sample_lines, split_sample
from support.waiting import wait_until

LABEL_KEYS = [f"team.example.com/k{index:02d}" for index in range(40)]
ALLOW_LIST = "|".join(re.escape(key) for key in LABEL_KEYS)  # an allow-list of 40 pod label keys
LIMIT = 20


def _label_names(line: str):
    _, labels, _ = split_sample(line) if "{" in line else (line, "", "")
    return re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"', labels)


def _node_with_labelled_pods(api, kubelet):
    """Two pods sharing a GPU, each with the 40 allowed labels, unrelated ones and annotations."""
    labels = {key: f"value-{index}" for index, key in enumerate(LABEL_KEYS)}
    labels["not-allowed"] = "x"
    annotations = {f"note-{index}": "some free text" for index in range(5)}
    for pod in ("wide-a", "wide-b"):
        add_pod(api, "team", pod, labels=labels, annotations=annotations)
    kubelet.set_devices([AllocatedDevice("team", pod, "main", "nvidia.com/gpu.shared", f"{UUID1}::{index}")
                         for index, pod in enumerate(("wide-a", "wide-b"))])


def _attributed(exporter):
    def ready():
        text = scrape(exporter)
        return text if 'pod="wide-b"' in text and "label_team_example_com_k00" in text else None

    return wait_until(ready, timeout_seconds=30)


def test_no_sample_exceeds_the_limit_and_extras_go_in_order(node, api, run_exporter):
    kubelet = node[0]
    _node_with_labelled_pods(api, kubelet)
    args = ("--labels.extra", "pod_uid,workload", "--labels.pod-labels", ALLOW_LIST, "--labels.pod-annotations", ".*")

    unlimited = _attributed(start(run_exporter, node, *args))
    widest = max(len(_label_names(line)) for line in sample_lines(unlimited))
    assert widest > LIMIT + 30, widest  # without the limit the wide pods' samples carry every extra

    exporter = start(run_exporter, node, *args, "--labels.limit", str(LIMIT))
    text = _attributed(exporter)
    lines = sample_lines(text)
    assert all(len(_label_names(line)) <= LIMIT for line in lines), max(lines, key=lambda x: len(_label_names(x)))
    wide = [line for line in lines if 'pod="wide-a"' in line]
    samples = [line for line in wide if line.startswith("DCGM_")]
    info = [line for line in wide if line.startswith("pod_gpu_allocation_info")]
    assert samples and len(info) == 1
    for line in samples + info:
        names = _label_names(line)
        assert len(names) == LIMIT or line in info, line  # filled up to the limit, not below it
        # Annotations first, then pod labels from the end of the sorted keys; pod_uid and workload stay.
        assert not any(name.startswith("annotation_") for name in names), line
        assert {"pod_uid", "workload_kind", "workload", "label_team_example_com_k00"} <= set(names), line
        assert "label_team_example_com_k39" not in names, line
        kept = [name for name in names if name.startswith("label_")]
        assert kept == [f"label_team_example_com_k{index:02d}" for index in range(len(kept))], line
    # The info row has fewer labels of its own than a dcgm sample, so it keeps more pod labels.
    assert len([n for n in _label_names(info[0]) if n.startswith("label_")]) > len(
        [n for n in _label_names(samples[0]) if n.startswith("label_")])

    self_text = requests.get(exporter.url("/metrics"), timeout=10).text
    dropped = float(re.search(r"(?m)^pod_gpu_exporter_limited_labels_total (\S+)$", self_text).group(1))
    assert dropped > 0
    for _ in range(3):
        scrape(exporter)
    log = exporter.wait_for_log("--labels.limit 20")
    assert log.count("--labels.limit 20") == 1, log


def test_join_mode_moves_the_owners_onto_the_allocation_rows(node, api, run_exporter):
    kubelet, dcgm, _ = node
    _node_with_labelled_pods(api, kubelet)
    args = ("--labels.extra", "pod_uid", "--labels.pod-labels", ALLOW_LIST)
    samples_mode = _attributed(start(run_exporter, node, *args))

    exporter = start(run_exporter, node, *args, "--labels.mode", "join")

    def joined():
        text = scrape(exporter)
        return text if text.count('pod_gpu_allocation_info{namespace="team"') == 2 and "label_team" in text else None

    text = wait_until(joined, timeout_seconds=30)
    upstream = [line for line in sample_lines(dcgm.body.decode() if isinstance(dcgm.body, bytes) else dcgm.body)
                if line.startswith("DCGM_")]
    served = [line for line in sample_lines(text) if line.startswith("DCGM_")]
    # The dcgm samples exactly as upstream sent them, no label added.
    assert sorted(served) == sorted(upstream)
    info = [line for line in sample_lines(text) if line.startswith("pod_gpu_allocation_info")]
    for pod in ("wide-a", "wide-b"):
        row = [line for line in info if f'pod="{pod}"' in line]
        assert len(row) == 1 and f'UUID="{UUID1}"' in row[0] and "label_team_example_com_k39" in row[0], row
    # The same allocation rows as in samples mode; only the dcgm samples lost their owners.
    assert sorted(info) == sorted(line for line in sample_lines(samples_mode) if line.startswith("pod_gpu_allocation_info"))
    assert len(served) < len([line for line in sample_lines(samples_mode) if line.startswith("DCGM_")])


def _series_count(text: str) -> int:
    return len(sample_lines(text))


def test_join_mode_series_on_the_large_mig_node(socket_dir, run_exporter):
    # The benchmark's large node: 8 H100s x 7 MIG instances, 100 families, every instance held by a
    # pod; here each instance is also time-sliced between two pods, so samples mode copies every
    # instance sample once per holder while join mode adds one row per allocation.
    from benchmarks.node import SIZES, Node
    from support.fake_dcgm import FakeDcgmExporter
    from support.fake_kubelet import FakeKubelet

    large = Node(SIZES["large"])
    body = large.render()
    allocations = [dataclasses.replace(device, pod=f"{device.pod}-{replica}", device_id=f"{device.device_id}::{replica}")
                   for device in large.allocations() for replica in (0, 1)]
    with FakeKubelet(str(socket_dir / "kubelet.sock")) as kubelet, FakeDcgmExporter(body) as dcgm:
        kubelet.set_devices(allocations)
        counts = {}
        for mode in ("samples", "join"):
            exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                                     "--labels.mode", mode])
            text = wait_until(lambda: (lambda t: t if "pod_gpu_allocation_info{" in t else None)(scrape(exporter)))
            served = [line for line in sample_lines(text) if not line.startswith("pod_gpu_exporter_")]
            # pod_gpu_container_allocated_gpus, one row per holding container, is counted apart: it
            # is the same in both modes (the allocation people sum per namespace), not a label budget.
            per_container = [line for line in served if line.startswith("pod_gpu_container_allocated_gpus{")]
            counts[mode] = len(served) - len(per_container)
            assert len(per_container) == len({(d.namespace, d.pod, d.container) for d in allocations})
    upstream = len(sample_lines(body.decode()))
    assert counts["join"] <= upstream + len(allocations), (counts, upstream, len(allocations))
    assert counts["samples"] > upstream + len(allocations), (counts, upstream)  # what join mode saves
