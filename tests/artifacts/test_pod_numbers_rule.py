"""pod_gpu_utilization_ratio is the recording rule's value: the real promtool evaluates
prometheus/rules/pod-gpu-autoscaling.rules.yml over the very answer that served it, and must find exactly the pods the
answer gives a number, with those numbers (absent where the answer has none), in each mode and on an AMD node."""

from __future__ import annotations

import math
from typing import Dict, Tuple

import pytest

from exporter.core.identity import GpuKey, Owner
from exporter.core.mapping import Allocation, Mapping
from exporter.vendors.nvidia.demo.node import TEMPLATE, SimulatedDcgm
from exporter.vendors.nvidia.demo.workload import simulated_allocations, simulated_offered
from exporter.exposition.device_figures import read_device_figures
from exporter.exposition.pod_numbers import pod_utilization as computed_utilization
from exporter.vendors.amd import dialect
from exporter.vendors.amd.figures import AMD_FIGURES
from support.deploy_tools import PROMETHEUS_DIR
from support.fixtures import FIXTURES_DIR
from support.pod_numbers_node import (A800_DEVICES, A800_OFFERED, a800_body, pod_utilization, process_case, served)
from support.promtool_tests import input_series, run_rule_test

RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-autoscaling.rules.yml"
RECORD = "namespace_pod:pod_gpu_utilization:ratio"
AMD_NODE = FIXTURES_DIR / "amd" / "mi300x-node.prom"


# promtool compares values exactly, and two correct sums of the same floats may differ in their last bit (the
# rule's avg and the exporter's mean; the exporter writes 12 significant digits): both are rounded to this.
NEAREST = 1e-9


def _rounded(value: float) -> float:
    """PromQL's round(v, NEAREST), as its funcRound computes it."""
    inverse = 1.0 / NEAREST
    return math.floor(value * inverse + 0.5) / inverse


def _promtool_agrees(tmp_path, text: str, expected: Dict[Tuple[str, str], float], vendor: str):
    """promtool's run of the rule over `text` (one target's samples, held for 10 minutes), expecting exactly the
    pods of `expected`, with those values."""
    samples = [{"labels": f'{{namespace="{ns}",pod="{pod}",vendor="{vendor}"}}', "value": _rounded(value)}
               for (ns, pod), value in sorted(expected.items())]
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series(text, 10), "promql_expr_test": [
                {"expr": f"round({RECORD}, {NEAREST})", "eval_time": "5m", "exp_samples": samples}]}]}
    return run_rule_test(test, tmp_path / "pod-numbers.test.yml")


def _cases(tmp_path):
    devices, offered, shares = process_case()
    demo_body = SimulatedDcgm(TEMPLATE.read_text(), clock=lambda: 100.0).render()
    return {
        "A800, device mode, samples": served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED),
        "A800, device mode, join": served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED, mode="join"),
        "A800, process mode, samples": served(tmp_path, a800_body(), devices, shares, offered),
        "A800, process mode, join": served(tmp_path, a800_body(), devices, shares, offered, mode="join"),
        "demo, device mode": served(tmp_path, demo_body, simulated_allocations(), offered=simulated_offered()),
    }


@pytest.mark.parametrize("case", ["A800, device mode, samples", "A800, device mode, join", "A800, process mode, samples",
                                  "A800, process mode, join", "demo, device mode"])
def test_the_rule_over_the_served_answer_gives_each_pod_the_served_number(tmp_path, case):
    text = _cases(tmp_path)[case]
    served_numbers = pod_utilization(text)
    assert served_numbers, text  # every case has pods with a number, and (checked by promtool) pods without
    result = _promtool_agrees(tmp_path, text, served_numbers, "nvidia")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_number_off_by_a_little_or_a_pod_too_many_fails(tmp_path):
    """The check can fail: promtool refuses a value 0.01 off, and a pod the rule leaves out."""
    text = served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED)
    numbers = pod_utilization(text)
    off = {**numbers, ("ml", "mixed"): numbers[("ml", "mixed")] + 0.01}
    assert _promtool_agrees(tmp_path, text, off, "nvidia").returncode != 0
    assert _promtool_agrees(tmp_path, text, {**numbers, ("web", "s1"): 0.5}, "nvidia").returncode != 0


def test_on_an_amd_node_the_rule_and_the_numbers_agree(tmp_path):
    """tests/data/amd's MI300X answer: a pod whose two containers hold two and one whole GPUs, an idle one, and
    two holders of CPX partitions, whose GPU's activity is the whole GPU's (none for them)."""
    body = AMD_NODE.read_bytes()
    figures = read_device_figures(body, AMD_FIGURES)
    rows = [line for line in body.decode().splitlines() if line.startswith("pod_gpu_allocation_info{")]
    held = []
    for row in rows:  # the answer's own allocation rows: who holds which gpu_id and partition
        labels = dict(pair.split("=", 1) for pair in row[row.index("{") + 1 : row.rindex("}")].split(","))
        value = {name: raw.strip('"') for name, raw in labels.items()}
        held.append((Owner(value["namespace"], value["pod"], value["container"]),
                     GpuKey("gpu", value[dialect.GPU_ID], "")))
    allocations = tuple(Allocation(owner, "gpu", f"dev-{index}", key) for index, (owner, key) in enumerate(held))
    numbers = computed_utilization(Mapping(allocations=allocations), figures, figures, {}, {}, by_mode=True)
    assert set(numbers) == {("amd-ml", "trainer-amd"), ("amd-ml", "idle-amd")}
    result = _promtool_agrees(tmp_path, body.decode(), numbers, "amd")
    assert result.returncode == 0, result.stdout + result.stderr
