"""Who uses a GPU they do not hold: the not_holder remainder broken down by named container, exactly."""

from __future__ import annotations

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import build_mapping
from exporter.vendors.nvidia.shares.compute import NOT_HOLDER, PodContainers, compute_shares
from exporter.vendors.nvidia.shares.render import render_shares, render_unallocated
from exporter.vendors.nvidia.nvml.processes import DeviceProcesses
from exporter.sources.procfs import ProcessOwner
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.share_invariants import check_unallocated_breakdown, parse_samples

UUID = "GPU-11111111-2222-3333-4444-555555555555"
GPU = GpuIdentity(UUID, "0", "nvidia0", "")
MIG = GpuIdentity(UUID, "0", "nvidia0", "3")
UIDS = {name: f"{index:08x}-0000-4000-8000-000000000000" for index, name in enumerate(("a", "x", "y"))}
PODS = {UIDS[name]: PodContainers("ml", f"pod-{name}", {name * 64: "main", "f" * 63 + name: "side"})
        for name in ("a", "x", "y")}
UNKNOWN_POD = ProcessOwner("99999999-0000-4000-8000-000000000000", "d" * 64)


def process_of(name: str, container: str = "main") -> ProcessOwner:
    return ProcessOwner(UIDS[name], name * 64 if container == "main" else "f" * 63 + name)


def held_by_a():
    return build_mapping(DEVICE_FORMS, [Device("ml", "pod-a", "main", "nvidia.com/gpu", UUID)])


def not_holder(shares):
    entry, = shares.devices
    remainder, = (r for r in entry.remainders if r.reason == NOT_HOLDER)
    return remainder


def table(shares):
    return {(s.owner.pod, s.owner.container): (s.memory_bytes, s.sm_units, s.processes) for s in shares.unallocated}


def test_each_container_using_a_gpu_it_does_not_hold_is_named_and_adds_up_to_not_holder():
    device = DeviceProcesses(GPU, {10: 100, 20: 30, 21: 12, 30: 7, 31: 5, 40: 1},
                             {10: 0.4, 20: 0.1, 21: 0.05, 30: 0.2, 31: 0.01})
    owners = {10: process_of("a"), 20: process_of("x"), 21: process_of("x"), 30: process_of("y"),
              31: process_of("a", "side"), 40: None}  # pod-a's side container holds nothing: it is named too
    shares = compute_shares([device], held_by_a(), owners, PODS)
    assert table(shares) == {("pod-a", "side"): (5, 100, 1), ("pod-x", "main"): (42, 1500, 2),
                             ("pod-y", "main"): (7, 2000, 1)}
    remainder = not_holder(shares)
    assert sum(s.memory_bytes for s in shares.unallocated) == remainder.memory_bytes == 54
    assert sum(s.sm_units for s in shares.unallocated) == remainder.sm_units == 3600
    assert sum(s.processes for s in shares.unallocated) == remainder.processes


def test_processes_the_api_cannot_name_stay_in_not_holder_only():
    device = DeviceProcesses(GPU, {20: 30, 33: 10}, {20: 0.1, 33: 0.3})
    shares = compute_shares([device], held_by_a(), {20: process_of("x"), 33: UNKNOWN_POD}, PODS)
    assert table(shares) == {("pod-x", "main"): (30, 1000, 1)}
    assert not_holder(shares)[2:] == (40, 4000, 2)


def test_scaled_sm_is_split_again_so_the_breakdown_still_adds_up_exactly():
    # 0.7 + 0.6 + 0.4 + 0.3 = 2.0: the device is scaled to 1, the not_holder part of it split by the samples.
    device = DeviceProcesses(GPU, {10: 1, 20: 1, 30: 1, 33: 1}, {10: 0.7, 20: 0.6, 30: 0.4, 33: 0.3})
    owners = {10: process_of("a"), 20: process_of("x"), 30: process_of("y"), 33: UNKNOWN_POD}
    shares = compute_shares([device], held_by_a(), owners, PODS)
    remainder = not_holder(shares)
    assert remainder.sm_units == 6500  # 13000 of 20000 raw units, as before the breakdown existed
    assert table(shares) == {("pod-x", "main"): (1, 3000, 1), ("pod-y", "main"): (1, 2000, 1)}
    assert remainder.sm_units - sum(s.sm_units for s in shares.unallocated) == 1500  # the unnamed pod's


def test_mig_instances_have_memory_only_and_holders_are_never_in_the_breakdown():
    mapping = build_mapping(DEVICE_FORMS, [Device("ml", "pod-a", "main", "nvidia.com/mig-1g.10gb", f"MIG-GPU-{UUID[4:]}/3/0")])
    device = DeviceProcesses(MIG, {10: 1 << 30, 20: 1 << 20}, None)
    shares = compute_shares([device], mapping, {10: process_of("a"), 20: process_of("x")}, PODS)
    assert table(shares) == {("pod-x", "main"): (1 << 20, None, 1)}
    text = render_unallocated(shares, "kubernetes")
    assert "pod_gpu_unallocated_sm_utilization_ratio" not in text
    assert (f'pod_gpu_unallocated_memory_used_bytes{{UUID="{UUID}",gpu="0",GPU_I_ID="3",namespace="ml",'
            f'pod="pod-x",container="main"}} 1048576') in text.splitlines()


def test_rendered_series_carry_owner_labels_in_the_style():
    device = DeviceProcesses(GPU, {10: 100, 20: 30}, {10: 0.4, 20: 0.25})
    shares = compute_shares([device], held_by_a(), {10: process_of("a"), 20: process_of("x")}, PODS)
    text = render_unallocated(shares, "legacy")
    labels = f'UUID="{UUID}",gpu="0",pod_name="pod-x",pod_namespace="ml",container_name="main"'
    assert text == (
        "# HELP pod_gpu_unallocated_memory_used_bytes Framebuffer memory used on this GPU or MIG instance by the "
        "container's processes although the container does not hold it: the named part of reason not_holder.\n"
        "# TYPE pod_gpu_unallocated_memory_used_bytes gauge\n"
        f"pod_gpu_unallocated_memory_used_bytes{{{labels}}} 30\n"
        "# HELP pod_gpu_unallocated_sm_utilization_ratio SM utilisation (0-1) of this GPU by the container's "
        "processes although the container does not hold it: the named part of reason not_holder.\n"
        "# TYPE pod_gpu_unallocated_sm_utilization_ratio gauge\n"
        f"pod_gpu_unallocated_sm_utilization_ratio{{{labels}}} 0.25\n")
    check_unallocated_breakdown(parse_samples(render_shares(shares, "legacy") + text), named_exactly=True)


def test_no_outsider_no_series():
    device = DeviceProcesses(GPU, {10: 100, 33: 5}, {10: 0.4})
    shares = compute_shares([device], held_by_a(), {10: process_of("a"), 33: UNKNOWN_POD}, PODS)
    assert shares.unallocated == () and render_unallocated(shares, "kubernetes") == ""
    assert Owner("ml", "pod-a", "main") in {s.owner for s in shares.holders}


def test_the_label_cache_keeps_only_the_last_refreshs_containers():
    cache = {}
    first = compute_shares([DeviceProcesses(GPU, {20: 30}, None)], held_by_a(), {20: process_of("x")}, PODS)
    second = compute_shares([DeviceProcesses(GPU, {30: 7}, None)], held_by_a(), {30: process_of("y")}, PODS)
    assert 'pod="pod-x"' in render_unallocated(first, "kubernetes", cache)
    assert 'pod="pod-y"' in render_unallocated(second, "kubernetes", cache)
    assert [owner.pod for _device, owner in cache] == ["pod-y"]  # pod-x left: its text is not kept
