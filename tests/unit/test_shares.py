"""Each holder's own share, as a pure function: holders from the kubelet, processes from NVML and cgroups."""

from __future__ import annotations

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import build_mapping
from exporter.vendors.nvidia.shares.compute import PodContainers, Shares, compute_shares
from exporter.vendors.nvidia.shares.render import render_shares
from exporter.vendors.nvidia.nvml.processes import DeviceProcesses
from exporter.sources.procfs import ProcessOwner
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device

UUID = "GPU-11111111-2222-3333-4444-555555555555"
GPU = GpuIdentity(UUID, "0", "nvidia0", "")
MIG = GpuIdentity(UUID, "0", "nvidia0", "3")
UIDS = {name: f"{index:08x}-0000-4000-8000-000000000000" for index, name in enumerate(("a", "b", "c", "x"))}
PODS = {UIDS[name]: PodContainers("ml", f"pod-{name}", {name * 64: "main", "f" * 63 + name: "side"})
        for name in ("a", "b", "c", "x")}


def holder(name: str, container: str = "main") -> Owner:
    return Owner("ml", f"pod-{name}", container)


def process_of(name: str, container_id: str = "") -> ProcessOwner:
    return ProcessOwner(UIDS[name], container_id or name * 64)


def time_sliced(*names: str):
    return build_mapping(DEVICE_FORMS, [Device("ml", f"pod-{n}", "main", "nvidia.com/gpu", f"{UUID}::{i}") for i, n in enumerate(names)])


def as_table(shares: Shares):
    return {(s.device.instance, s.owner.pod): (s.memory_bytes, s.sm_ratio) for s in shares.holders}


def test_three_pods_with_zero_one_and_two_processes():
    device = DeviceProcesses(GPU, {10: 100, 20: 200, 21: 50}, {20: 0.30, 21: 0.25})
    owners = {10: process_of("b"), 20: process_of("c"), 21: process_of("c")}
    shares = compute_shares([device], time_sliced("a", "b", "c"), owners, PODS)
    assert as_table(shares) == {("", "pod-a"): (0, 0.0), ("", "pod-b"): (100, 0.0), ("", "pod-c"): (250, 0.55)}
    assert shares.unattributed == ((GPU, 0),)


def test_host_processes_other_pods_and_unseen_pids_are_never_given():
    device = DeviceProcesses(GPU, {10: 100, 30: 7, 31: 8, 32: 9, 33: 10}, {10: 0.5, 30: 0.4})
    owners = {10: process_of("a"), 30: None, 31: process_of("x"),  # host process, a pod not holding this GPU
              33: ProcessOwner("99999999-0000-4000-8000-000000000000", "d" * 64)}  # a pod the API does not know
    shares = compute_shares([device], time_sliced("a", "b"), owners, PODS)  # 32: its cgroup could not be read
    assert as_table(shares) == {("", "pod-a"): (100, 0.5), ("", "pod-b"): (0, 0.0)}
    assert shares.unattributed == ((GPU, 4),)


def test_a_container_of_a_holding_pod_that_does_not_hold_the_gpu_gets_nothing():
    device = DeviceProcesses(GPU, {10: 100}, {})
    owners = {10: process_of("a", "f" * 63 + "a")}  # pod-a's "side" container; only "main" holds the GPU
    shares = compute_shares([device], time_sliced("a"), owners, PODS)
    assert as_table(shares) == {("", "pod-a"): (0, 0.0)} and shares.unattributed == ((GPU, 1),)


def test_mig_instance_shared_by_two_pods_has_no_sm_series():
    mapping = build_mapping(DEVICE_FORMS, [Device("ml", "pod-a", "main", "nvidia.com/mig-1g.10gb", f"MIG-GPU-{UUID[4:]}/3/0::0"),
                             Device("ml", "pod-b", "main", "nvidia.com/mig-1g.10gb", f"MIG-GPU-{UUID[4:]}/3/0::1")])
    device = DeviceProcesses(MIG, {10: 1 << 30, 11: 1 << 20}, None)
    shares = compute_shares([device], mapping, {10: process_of("a"), 11: process_of("b")}, PODS)
    assert as_table(shares) == {("3", "pod-a"): (1 << 30, None), ("3", "pod-b"): (1 << 20, None)}
    text = render_shares(shares, "kubernetes")
    assert "pod_gpu_container_sm_utilization_ratio" not in text
    assert (f'pod_gpu_container_memory_used_bytes{{UUID="{UUID}",gpu="0",GPU_I_ID="3",namespace="ml",'
            f'pod="pod-a",container="main"}} 1073741824') in text.splitlines()


def test_holders_are_found_through_every_device_id_form():
    device = GpuIdentity(UUID, "2", "nvidia5", "")
    for device_id, resource in ((UUID, "nvidia.com/gpu"), ("2", "nvidia.com/gpu"), ("nvidia5", "nvidia.com/gpu"),
                                ("nvidia5/vgpu1", "nvidia.com/gpu")):
        mapping = build_mapping(DEVICE_FORMS, [Device("ml", "pod-a", "main", resource, device_id)])
        assert mapping.owners_of(device) == (holder("a"),), device_id
    assert build_mapping(DEVICE_FORMS, [Device("ml", "pod-a", "main", "nvidia.com/gpu", "3")]).owners_of(device) == ()


def test_an_unheld_device_has_no_share_series_but_counts_its_processes_and_their_memory():
    device = DeviceProcesses(GPU, {10: 100, 11: 5}, {10: 0.1})
    shares = compute_shares([device], build_mapping(DEVICE_FORMS, []), {10: None, 11: process_of("x")}, PODS)
    assert shares.holders == () and shares.unattributed == ((GPU, 2),)
    labels = f'UUID="{UUID}",gpu="0"'
    assert render_shares(shares, "kubernetes") == (
        "# HELP pod_gpu_unattributed_memory_used_bytes Framebuffer memory used on this GPU or MIG instance by "
        "processes of none of its holders: reason host (no pod, or unreadable) or not_holder (a pod that does not "
        "hold it).\n"
        "# TYPE pod_gpu_unattributed_memory_used_bytes gauge\n"
        f'pod_gpu_unattributed_memory_used_bytes{{{labels},reason="host"}} 100\n'
        f'pod_gpu_unattributed_memory_used_bytes{{{labels},reason="not_holder"}} 5\n'
        "# HELP pod_gpu_unattributed_sm_utilization_ratio SM utilisation (0-1) of this GPU by processes of none of "
        "its holders, by reason; with the holders' it adds up to at most 1.\n"
        "# TYPE pod_gpu_unattributed_sm_utilization_ratio gauge\n"
        f'pod_gpu_unattributed_sm_utilization_ratio{{{labels},reason="host"}} 0.1\n'
        f'pod_gpu_unattributed_sm_utilization_ratio{{{labels},reason="not_holder"}} 0\n'
        "# HELP pod_gpu_exporter_unattributed_processes Processes on this GPU or MIG instance that belong to none "
        "of its holders (host processes, other pods, unseen PIDs).\n"
        "# TYPE pod_gpu_exporter_unattributed_processes gauge\n"
        f'pod_gpu_exporter_unattributed_processes{{{labels}}} 2\n')


def remainders(shares: Shares):
    return {(r.device.instance, r.reason): (r.memory_bytes, r.sm_ratio, r.processes)
            for entry in shares.devices for r in entry.remainders}


def test_memory_given_to_no_holder_is_kept_by_reason_and_everything_adds_up():
    device = DeviceProcesses(GPU, {10: 100, 30: 7, 31: 8, 32: 9, 33: 10, 34: 11}, {10: 0.5, 30: 0.25, 31: 0.125})
    owners = {10: process_of("a"), 30: None, 31: process_of("x"),  # host process; a pod not holding this GPU
              33: ProcessOwner("99999999-0000-4000-8000-000000000000", "d" * 64),  # a pod the API does not know
              34: process_of("a", "f" * 63 + "a")}  # pod-a's side container: its pod holds the GPU, it does not
    shares = compute_shares([device], time_sliced("a", "b"), owners, PODS)  # 32: its cgroup could not be read
    assert remainders(shares) == {("", "host"): (7 + 9, 0.25, 2), ("", "not_holder"): (8 + 10 + 11, 0.125, 3)}
    entry, = shares.devices
    assert sum(s.memory_bytes for s in entry.holders + entry.remainders) == sum(device.memory_bytes.values())
    assert entry.processes == len(device.memory_bytes)


def test_sm_of_holders_and_remainders_is_scaled_to_at_most_one():
    # The driver's per-process samples can add up past the device: 0.7 + 0.6 + 0.4 = 1.7.
    device = DeviceProcesses(GPU, {10: 1, 11: 1, 12: 1}, {10: 0.7, 11: 0.6, 12: 0.4})
    shares = compute_shares([device], time_sliced("a", "b"), {10: process_of("a"), 11: process_of("b"), 12: None},
                            PODS)
    entry, = shares.devices
    units = [s.sm_units for s in entry.holders + entry.remainders]
    assert sum(units) == 10_000 and units == [4118, 3529, 2353, 0]  # 7000:6000:4000 of 10000, exactly
    text = render_shares(shares, "kubernetes")
    served = [float(line.rpartition(" ")[2]) for line in text.splitlines() if "sm_utilization_ratio{" in line]
    assert sum(served) <= 1.0


def test_sm_sum_is_capped_at_one_and_legacy_label_names_are_used():
    device = DeviceProcesses(GPU, {10: 1, 11: 1}, {10: 0.7, 11: 0.6})
    shares = compute_shares([device], time_sliced("a"), {10: process_of("a"), 11: process_of("a")}, PODS)
    text = render_shares(shares, "legacy")
    assert (f'pod_gpu_container_sm_utilization_ratio{{UUID="{UUID}",gpu="0",pod_name="pod-a",pod_namespace="ml",'
            f'container_name="main"}} 1') in text.splitlines()


def test_nothing_read_renders_nothing():
    assert render_shares(Shares(()), "kubernetes") == ""
