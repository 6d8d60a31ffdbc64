"""Each pod's numbers, worked out by hand over real dcgm scrapes (the A800 MIG node, the demo's simulated node), a
hand-written AMD node's answer, in device and process mode: pod_gpu_utilization_ratio and pod_gpu_memory_used_bytes."""

from __future__ import annotations

import pytest

from exporter.core.identity import GpuKey, Owner
from exporter.core.mapping import Allocation, Mapping
from exporter.vendors.nvidia.demo.node import TEMPLATE, SimulatedDcgm
from exporter.vendors.nvidia.demo.workload import FB_MIB, gpu_load, simulated_allocations, simulated_offered
from exporter.exposition.device_figures import read_device_figures
from exporter.exposition.pod_numbers import (HolderUse, container_memory, held_devices_utilization,
                                             own_utilization, pod_utilization, render_pod_numbers)
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.figures import AMD_FIGURES
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from support.fixtures import FIXTURES_DIR, fixture_bytes
from support.pod_numbers_node import (A800, A800_DEVICES, A800_OFFERED, BLANK, MIB, UUIDS, a800_body, added_family,
                                      container_memory as served_memory, identity, pod_utilization as served_utilization,
                                      node_scraper, process_case, served, with_values)


def test_device_mode_averages_the_devices_a_pod_holds_alone_each_once(tmp_path):
    text = served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED)
    assert served_utilization(text) == pytest.approx({
        ("ml", "mixed"): (0.3 + 0.6 + 0.9) / 3,  # its containers' GPUs together, each once
        ("ml", "mig"): (0.25 + 0.75) / 2,  # a MIG instance's engine activity
        ("ml", "pair"): 0.2,  # one GPU, held by two of its own containers: still the pod's alone
    })  # s1 and s2 share GPU 5, ts holds a replica, blank's GPU reports no percentage: none of them has one
    assert served_memory(text) == {
        ("ml", "mixed", "a"): 2 * MIB, ("ml", "mixed", "b"): 4 * MIB,  # FB_USED of the GPUs each holds alone
        ("ml", "mig", "main"): 20 * MIB,  # each MIG instance's own, added
        ("ml", "blank", "main"): 2 * MIB,
    }  # GPU 4 is held by two containers, GPU 5 by two pods, GPU 6 through a replica: nobody's alone


def test_join_mode_and_the_legacy_style_give_the_same_numbers(tmp_path):
    samples = served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED)
    joined = served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED, mode="join")
    assert served_utilization(joined) == served_utilization(samples)
    assert served_memory(joined) == served_memory(samples)
    legacy = served(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED, style="legacy")
    assert 'pod_gpu_utilization_ratio{pod_name="mixed",pod_namespace="ml"} 0.6\n' in legacy
    assert 'pod_gpu_memory_used_bytes{pod_name="mixed",pod_namespace="ml",container_name="a"} 2097152\n' in legacy


def test_new_values_of_the_same_gpus_give_new_numbers_and_an_unchanged_answer_the_same_rows(tmp_path):
    """A body whose values alone moved is answered by refilling the last rewrite, the kept blocks untouched:
    each pod's numbers follow the new values all the same."""
    scraper = node_scraper(tmp_path, a800_body(), A800_DEVICES, offered=A800_OFFERED)
    first = scraper.scrape().decode()
    assert served_utilization(scraper.scrape().decode()) == served_utilization(first)
    (tmp_path / "dcgm.prom").write_bytes(with_values(a800_body(), "DCGM_FI_DEV_GPU_UTIL", {("1", ""): "90"}))
    moved = served_utilization(scraper.scrape().decode())
    assert scraper.rewrites == 2
    assert moved[("ml", "mixed")] == pytest.approx((0.9 + 0.6 + 0.9) / 3)
    assert moved[("ml", "mig")] == served_utilization(first)[("ml", "mig")]


def test_process_mode_reads_each_pods_own_share_over_the_gpus_it_holds(tmp_path):
    devices, offered, shares = process_case()
    text = served(tmp_path, a800_body(), devices, shares, offered)
    assert served_utilization(text) == pytest.approx({
        ("ml", "mixed"): (0.4 + 0.1 + 0.0) / 3,  # its own SM over the three GPUs its containers hold
        ("web", "ts-a"): 1.0,  # 0.7 of a GPU on a half share: more than its share, read as fully busy
        ("web", "ts-b"): 0.4,  # 0.2 on a half share, whatever ts-a keeps the GPU busy with
        ("ml", "idle"): 0.0,  # present, and 0
        ("ml", "mig"): 0.25,  # no own share on a MIG instance: its engine activity
    })
    assert served_memory(text) == {  # each holder's own, measured per holder
        ("ml", "mixed", "a"): 300 * MIB, ("ml", "mixed", "b"): 100 * MIB, ("web", "ts-a", "main"): 500 * MIB,
        ("web", "ts-b", "main"): 7 * MIB, ("ml", "idle", "main"): 0, ("ml", "mig", "main"): 9 * MIB}


def test_the_demos_node_in_device_mode_has_trainer_0s_number_and_none_for_gpu_2s_holders(tmp_path):
    body = SimulatedDcgm(TEMPLATE.read_text(), clock=lambda: 100.0).render()  # its first reading: 0 s in
    text = served(tmp_path, body, simulated_allocations(), offered=simulated_offered())
    # trainer-0 holds GPUs 0 and 1 whole; GPU 2 is time-sliced, so llm-server-a and llm-server-b have no number.
    percent = [round(100 * gpu_load(index, 0.0)) for index in (0, 1)]  # what the simulation writes as GPU_UTIL
    assert served_utilization(text) == {("ml-team", "trainer-0"): pytest.approx(sum(percent) / 200)}
    used_mib = [round(FB_MIB * gpu_load(index, 0.0)) for index in (0, 1)]  # and as FB_USED
    assert served_memory(text) == {("ml-team", "trainer-0", "pytorch"): sum(used_mib) * MIB}


def test_a_pod_without_any_gpu_sample_has_no_number_and_no_pod_none(tmp_path):
    text = served(tmp_path, fixture_bytes(A800), [AllocatedDevice("ml", "ghost", "c", "nvidia.com/gpu", "GPU-00000000-0000-0000-0000-000000000000")])
    assert served_utilization(text) == {} and served_memory(text) == {}
    assert "pod_gpu_utilization_ratio" not in text  # no header without a sample
    assert "pod_gpu_utilization_ratio" not in served(tmp_path, fixture_bytes(A800), [])


# --- pure: the definitions, one by one ---------------------------------------------------------------------


def test_own_utilization_is_summed_over_containers_and_divided_by_the_pods_gpus():
    uses = {(identity(1), Owner("a", "p", "x")): HolderUse(0.5, None), (identity(2), Owner("a", "p", "y")): HolderUse(0.25, 0),
            (identity(3), Owner("a", "q", "x")): HolderUse(None, 5)}  # no SM share: no own number
    gpus = {("a", "p", "x"): 1.0, ("a", "p", "y"): 2.0, ("a", "q", "x"): 1.0, ("a", "r", "x"): 1.0}
    assert own_utilization(uses, gpus) == {("a", "p"): 0.25}
    assert own_utilization(uses, {}) == {}  # holds no GPU it is counted for: no number


def test_a_blank_percentage_falls_back_to_the_engine_activity_and_a_partition_never_uses_the_percentage():
    body = with_values(fixture_bytes(A800), "DCGM_FI_DEV_GPU_UTIL", {("1", ""): BLANK, ("2", ""): "40"})
    body = added_family(body, "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                        {("1", ""): "0.125", ("2", ""): "0.9", ("0", "3"): "0.5"})
    body = added_family(body, "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", {("0", "5"): "80"})  # not a whole GPU's
    figures = read_device_figures(body, DCGM_FIGURES)
    mapping = _mapping([(Owner("n", "blank", "c"), GpuKey("UUID", UUIDS[1], "")),
                        (Owner("n", "both", "c"), GpuKey("UUID", UUIDS[2], "")),
                        (Owner("n", "mig", "c"), GpuKey("UUID", UUIDS[0], "5"))])
    assert held_devices_utilization(mapping, figures, figures) == {
        ("n", "blank"): 0.125,  # GPU_UTIL's sentinel is no percentage: GR_ENGINE_ACTIVE stands in
        ("n", "both"): 0.4,  # the percentage first
    }  # instance 5 has a GPU_UTIL sample, which the rule reads only on whole GPUs, and no engine activity


def test_a_partitioned_gpus_activity_is_nobodys_and_its_holders_have_no_number():
    """An AMD node's answer (tests/data/amd): GPUs 0-3 whole, the fifth split in CPX partitions, its activity
    served on partition 0 for the whole GPU."""
    body = (FIXTURES_DIR / "amd" / "mi300x-node.prom").read_bytes()
    figures = read_device_figures(body, AMD_FIGURES)
    holders = [("amd-ml", "trainer-amd", "pytorch", "0"), ("amd-ml", "trainer-amd", "pytorch", "1"),
               ("amd-ml", "trainer-amd", "loader", "2"), ("amd-ml", "idle-amd", "jupyter", "3"),
               ("amd-batch", "embed-a", "worker", "4"), ("amd-batch", "embed-b", "worker", "5")]
    mapping = _mapping([(Owner(ns, pod, container), GpuKey("gpu", gpu_id, ""))
                        for ns, pod, container, gpu_id in holders])
    assert pod_utilization(mapping, figures, figures, {}, {}, by_mode=True) == pytest.approx({
        ("amd-ml", "trainer-amd"): (0.8 + 0.4 + 0.6) / 3,  # two containers, three whole GPUs
        ("amd-ml", "idle-amd"): 0.0})  # embed-a's partition 0 carries the whole GPU's 77 %: not its own
    assert container_memory(mapping, figures, figures, {}) == {
        Owner("amd-ml", "trainer-amd", "pytorch"): 180000 * MIB, Owner("amd-ml", "trainer-amd", "loader"): 30000 * MIB,
        Owner("amd-ml", "idle-amd", "jupyter"): 300 * MIB,
        Owner("amd-batch", "embed-a", "worker"): 9000 * MIB, Owner("amd-batch", "embed-b", "worker"): 7000 * MIB}


def test_rows_carry_the_pods_extra_labels_and_whole_bytes():
    mapping = Mapping(extra_labels={("ml", "p"): (("workload", "train"),)})
    text = render_pod_numbers(mapping, {("ml", "p"): 0.5}, {Owner("ml", "p", "c"): 3.0 * MIB}, "kubernetes")
    assert 'pod_gpu_utilization_ratio{namespace="ml",pod="p",workload="train"} 0.5\n' in text
    assert 'pod_gpu_memory_used_bytes{namespace="ml",pod="p",container="c",workload="train"} 3145728\n' in text
    assert render_pod_numbers(Mapping(), {}, {}, "kubernetes") == ""


def _mapping(held) -> Mapping:
    """A mapping of (owner, key) pairs, each a whole device by its own ID."""
    allocations = tuple(Allocation(owner, "gpu", f"dev-{index}", key) for index, (owner, key) in enumerate(held))
    owners = {}
    for owner, key in held:
        owners[key] = tuple(sorted(set(owners.get(key, ())) | {owner}))
    return Mapping(owners=owners, allocations=allocations)
