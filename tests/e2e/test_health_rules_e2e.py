"""The label sets prometheus/rules/pod-gpu-health.rules.test.yml feeds promtool are the ones the real exporter
serves: each is found, less the target labels scraping adds, in a scrape of the node it describes."""

from __future__ import annotations

import re

import pytest
import yaml

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import PROMETHEUS_DIR
from support.share_invariants import parse_samples
from support.shared_node import A800_FIXTURE, A800_GPU0, L4, L4_FIXTURE, MIB, MIG_GI3, shares_served

TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.test.yml"
TARGET_LABELS = ("instance", "node")
_SERIES = re.compile(r"^(\w+)\{(.*)\}$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def rule_test_label_sets(family: str, uuid: str):
    """The label sets of `family`'s input series on one GPU, as the rule tests give them."""
    found = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for series in case["input_series"]:
            name, labels = _SERIES.match(series["series"]).groups()
            named = {k: v for k, v in _LABEL.findall(labels) if k not in TARGET_LABELS}
            if name == family and named["UUID"] == uuid:
                found.add(frozenset(named.items()))
    return found


def whole_gpu(gpu_node):
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4)])
    gpu_node.nvml.gpu(0, L4).process(L4, 101, 900 * MIB).process(L4, 201, 1000 * MIB).process(L4, 301, 0).write()
    for pid, pod in ((101, "trainer"), (201, "intruder"), (301, "idle")):
        gpu_node.run_in(pid, pod)
    return L4, L4_FIXTURE


def mig_instance(gpu_node):
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/mig-2g.20gb", MIG_GI3)])
    gpu_node.nvml.gpu(0, A800_GPU0).mig(0, 3, MIG_GI3).process(MIG_GI3, 101, 900 * MIB)
    gpu_node.nvml.process(MIG_GI3, 401, 32 * MIB).write()
    gpu_node.run_in(101, "trainer")
    gpu_node.run_in(401, "probe")
    return A800_GPU0, A800_FIXTURE


@pytest.mark.parametrize("node", [whole_gpu, mig_instance], ids=["whole-gpu", "mig-instance"])
def test_rule_test_label_sets_are_served_by_the_real_exporter(gpu_node, node):
    gpu_node.add_pod("trainer")
    gpu_node.add_pod("intruder", namespace="other")
    for name in ("idle", "probe"):
        gpu_node.add_pod(name)
    uuid, fixture = node(gpu_node)
    family = "pod_gpu_unallocated_memory_used_bytes"
    wanted = rule_test_label_sets(family, uuid)
    assert wanted, f"the rule tests have no {family} series on {uuid}"
    text = shares_served(gpu_node.start(fixture), family, count=len(wanted))
    served = set(parse_samples(text)[family])
    assert wanted <= served, f"rule tests' label sets the exporter does not serve: {wanted - served}"
