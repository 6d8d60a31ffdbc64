"""UTIL: each pod's busy fraction of the GPUs it holds, as `namespace_pod:pod_gpu_utilization:ratio`
defines it, from one look at a node's exporter; `--by` weighs it by GPUs held."""

from __future__ import annotations

import json

import pytest

from exporter.top.readings import Readings, add_scrapes, parse_text
from exporter.top.render import as_text, render
from exporter.top.shaping import shape
from exporter.top.table import build_table

A, B = 'namespace="ml",pod="a",container="c"', 'namespace="ml",pod="b",container="c"'
UUID0, UUID1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
GPU0, GPU1 = f'UUID="{UUID0}",gpu="0"', f'UUID="{UUID1}",gpu="1"'


def table_of(text: str):
    readings = Readings()
    add_scrapes(readings, "node-1", parse_text(text), parse_text(text), 1.0)
    return build_table(readings)


def util(text: str) -> dict:
    return {row.pod + ("/" + row.container if row.container != "c" else ""): row.utilization
            for row in table_of(text).rows}


def holds(owner: str, gpu: str, device_id: str, gpus: float = 1) -> str:
    return (f'pod_gpu_container_allocated_gpus{{{owner}}} {gpus}\n'
            f'pod_gpu_allocation_info{{{owner},resource="nvidia.com/gpu",device_id="{device_id}",{gpu}}} 1\n')


def test_process_mode_is_its_own_sm_over_the_gpus_it_holds_at_most_one():
    text = (holds(A, GPU0, UUID0, 0.5) + holds(B, GPU1, UUID1, 2) +
            f'pod_gpu_container_sm_utilization_ratio{{{GPU0},{A}}} 0.22\n'
            f'pod_gpu_container_sm_utilization_ratio{{{GPU1},{B}}} 1.26\n')
    assert util(text) == pytest.approx({"a": 0.44, "b": 0.63})
    over = text.replace("} 0.22\n", "} 0.8\n")
    assert util(over)["a"] == 1.0  # more than its half share of a busy GPU: fully busy, never above 1


def test_a_holder_running_nothing_reads_zero_present():
    text = holds(A, GPU0, UUID0) + f'pod_gpu_container_sm_utilization_ratio{{{GPU0},{A}}} 0\n'
    assert util(text) == {"a": 0.0}
    row, = json.loads(render(shape(table_of(text), None, [], "pod", "sm"), "json", "pod"))["rows"]
    assert row["utilization"] == 0.0


def test_a_pod_of_several_containers_is_one_number_on_each_row():
    other = 'namespace="ml",pod="a",container="side"'
    text = (holds(A, GPU0, UUID0) + holds(other, GPU1, UUID1) +
            f'pod_gpu_container_sm_utilization_ratio{{{GPU0},{A}}} 0.5\n'
            f'pod_gpu_container_sm_utilization_ratio{{{GPU1},{other}}} 0.1\n')
    assert util(text) == pytest.approx({"a": 0.3, "a/side": 0.3})


def test_device_mode_is_the_mean_of_the_gpus_held_whole():
    text = (holds(A, GPU0, UUID0, 2) +
            f'pod_gpu_allocation_info{{{A},resource="nvidia.com/gpu",device_id="{UUID1}",{GPU1}}} 1\n'
            f'DCGM_FI_DEV_GPU_UTIL{{{GPU0},Hostname="h"}} 40\nDCGM_FI_DEV_GPU_UTIL{{{GPU1},Hostname="h"}} 60\n')
    assert util(text) == pytest.approx({"a": 0.5})
    idle = text.replace("} 40\n", "} 0\n").replace("} 60\n", "} 0\n")
    assert util(idle) == {"a": 0.0}
    # DCGM's blank sentinel is no utilisation: that GPU is left out of the mean.
    assert util(text.replace("} 60\n", "} 9223372036854775794\n")) == pytest.approx({"a": 0.4})


@pytest.mark.parametrize("shared", [
    holds(B, GPU0, UUID0),  # a second pod on the same GPU
    None,  # a time-slicing replica
])
def test_a_pod_holding_a_shared_gpu_has_none_in_device_mode(shared):
    mine = holds(A, GPU0, UUID0 + "::1" if shared is None else UUID0, 0.5 if shared is None else 1)
    text = mine + (shared or "") + f'DCGM_FI_DEV_GPU_UTIL{{{GPU0}}} 70\n'
    found = util(text)
    assert found["a"] is None and all(value is None for value in found.values()), found
    line = as_text(table_of(text), "pod").splitlines()[1].split()
    assert line[5:7] == ["0.70*", "-"], line  # SM shows the GPU's (marked); UTIL has none


def test_a_mig_instance_reads_its_engine_activity():
    text = (f'pod_gpu_container_allocated_gpus{{{A}}} 0.375\n'
            f'pod_gpu_allocation_info{{{A},resource="nvidia.com/mig-3g.40gb",device_id="MIG-x",{GPU0},'
            f'GPU_I_ID="2"}} 1\n'
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{GPU0},GPU_I_ID="2"}} 0.3\n'
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{GPU0},GPU_I_ID="1"}} 0.9\n')
    assert util(text) == {"a": 0.3}


def test_groups_weigh_it_by_gpus_held_never_add_it_up():
    text = (holds(A, GPU0, UUID0, 2) + holds(B, GPU1, UUID1, 0.25) +
            f'pod_gpu_container_sm_utilization_ratio{{{GPU0},{A}}} 0.75\n'
            f'pod_gpu_container_sm_utilization_ratio{{{GPU1},{B}}} 0.125\n')
    row, = shape(table_of(text), None, [], "namespace", "sm").rows
    assert row.utilization == pytest.approx((0.75 + 0.125) / 2.25)
    assert as_text(shape(table_of(text), None, [], "namespace", "sm"), "namespace").splitlines()[1].split()[4] == "39%"


def test_top_and_the_rule_call_the_same_devices_shared():
    """top's UTIL has no Prometheus on the proxy path, so it keeps its own copy of the rule's pattern for
    a device held as a share of a GPU: the two must not drift apart."""
    from pathlib import Path

    from exporter.top import utilization

    rules = Path(__file__).resolve().parents[2] / "prometheus" / "rules" / "pod-gpu-autoscaling.rules.yml"
    assert f'device_id=~"{utilization._SHARE_OF_A_GPU.pattern}"' in rules.read_text()
