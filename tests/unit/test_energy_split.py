"""A GPU's energy split between holders and reasons, exactly to the millijoule; the counters kept across refreshes."""

from __future__ import annotations

import random

import pytest

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import build_mapping
from exporter.vendors.nvidia.shares.apportion import largest_remainder
from exporter.vendors.nvidia.shares.compute import PodContainers, compute_shares
from exporter.vendors.nvidia.shares.energy import IDLE, NO_HOLDER, SPLIT, UNATTRIBUTED, split_gpu_energy
from exporter.vendors.nvidia.shares.ledger import ShareLedger
from exporter.vendors.nvidia.nvml.processes import DeviceProcesses
from exporter.sources.procfs import ProcessOwner
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device

UUID = "GPU-11111111-2222-3333-4444-555555555555"
GPU = GpuIdentity(UUID, "0", "nvidia0", "")
UIDS = {name: f"{index:08x}-0000-4000-8000-000000000000" for index, name in enumerate("abcd")}
PODS = {UIDS[name]: PodContainers("ml", name, {name * 64: "main"}) for name in "abcd"}


def owner(name: str) -> Owner:
    return Owner("ml", name, "main")


def held_by(*names: str, device_id: str = UUID):
    return [Device("ml", name, "main", "nvidia.com/gpu", f"{device_id}::{i}") for i, name in enumerate(names)]


def shares_of(entries, devices, pods=PODS):
    """compute_shares where PIDs 1xx run in pod a, 2xx in b, 3xx in c, 4xx in d and 9xx on the host."""
    owners = {}
    for entry in entries:
        for pid in entry.memory_bytes:
            letter = "abcd"[pid // 100 - 1] if pid < 900 else None
            owners[pid] = None if letter is None else ProcessOwner(UIDS[letter], letter * 64)
    return compute_shares(entries, build_mapping(DEVICE_FORMS, devices), owners, pods)


@pytest.mark.parametrize("total,weights,parts", [
    (10, [1, 1, 1], [4, 3, 3]),  # the leftover unit to the first of equal remainders
    (7, [0, 0], [4, 3]),  # no weight at all: evenly, nothing lost
    (1000, [4118, 3529, 2353], [412, 353, 235]),
    (0, [5, 5], [0, 0]),
    (5, [], []),
])
def test_largest_remainder_adds_up_exactly(total, weights, parts):
    assert largest_remainder(total, weights) == parts


def test_largest_remainder_never_loses_a_unit_whatever_the_weights():
    rng = random.Random(20)
    for _ in range(2000):
        weights = [rng.randrange(0, 10_000) for _ in range(rng.randrange(1, 9))]
        total = rng.randrange(0, 10**12)
        parts = largest_remainder(total, weights)
        assert sum(parts) == total and all(part >= 0 for part in parts)


def test_an_exclusive_gpu_gives_its_whole_delta_to_its_holder_busy_or_not():
    shares = shares_of([DeviceProcesses(GPU, {}, {}, 1000)], held_by("a"))
    split = split_gpu_energy(12_345, shares.devices, UNATTRIBUTED)
    assert split.holders == {(GPU, owner("a")): 12_345}
    assert split.unattributed == {(GPU, IDLE): 0, (GPU, NO_HOLDER): 0}


def test_a_gpu_held_by_no_pod_leaves_its_delta_to_no_holder():
    shares = shares_of([DeviceProcesses(GPU, {901: 10}, {901: 0.9}, 1000)], [])
    assert split_gpu_energy(500, shares.devices, SPLIT) == ({}, {(GPU, IDLE): 0, (GPU, NO_HOLDER): 500})


def test_a_shared_gpu_splits_by_sm_activity_then_the_inactive_rest_by_policy():
    entries = [DeviceProcesses(GPU, {101: 1, 201: 1, 901: 1}, {101: 0.5, 201: 0.25, 901: 0.125}, 1000)]
    shares = shares_of(entries, held_by("a", "b", "c"))
    # active: a 50 %, b 25 %, c 0 %; the other 25 % (host 12.5 %, nothing 12.5 %) is inactive.
    split = split_gpu_energy(10_000, shares.devices, UNATTRIBUTED)
    assert split.holders == {(GPU, owner("a")): 5000, (GPU, owner("b")): 2500, (GPU, owner("c")): 0}
    assert split.unattributed[(GPU, IDLE)] == 2500
    split = split_gpu_energy(10_000, shares.devices, SPLIT)
    assert split.holders == {(GPU, owner("a")): 5834, (GPU, owner("b")): 3333, (GPU, owner("c")): 833}
    assert split.unattributed[(GPU, IDLE)] == 0


def test_a_mig_gpu_splits_by_memory_slices_then_within_each_instance():
    big, small, free = (GpuIdentity(UUID, "0", "nvidia0", gi) for gi in ("1", "5", "6"))
    entries = [DeviceProcesses(big, {101: 1}, None, 7000, 4),  # 3g.40gb: 4 of 8 memory slices
               DeviceProcesses(small, {201: 1}, None, 7000, 1), DeviceProcesses(free, {}, None, 7000, 2)]
    devices = [Device("ml", "a", "main", "nvidia.com/mig-3g.40gb", f"MIG-GPU-{UUID[4:]}/1/0"),
               *[Device("ml", name, "main", "nvidia.com/mig-1g.10gb", f"MIG-GPU-{UUID[4:]}/5/0::{i}")
                 for i, name in enumerate("bc")]]
    split = split_gpu_energy(7001, shares_of(entries, devices).devices, UNATTRIBUTED)
    assert split.holders == {(big, owner("a")): 4001, (small, owner("b")): 0, (small, owner("c")): 0}
    assert split.unattributed == {(big, IDLE): 0, (big, NO_HOLDER): 0, (small, IDLE): 1000, (small, NO_HOLDER): 0,
                                  (free, IDLE): 0, (free, NO_HOLDER): 2000}


def test_random_nodes_split_exactly_to_the_millijoule():
    rng = random.Random(7)
    for _ in range(300):
        pids = {pid: rng.randrange(1, 10**9) for pid in rng.sample([101, 102, 201, 301, 401, 901, 902], rng.randrange(0, 7))}
        sm = {pid: rng.randrange(0, 101) / 100 for pid in pids if rng.random() < 0.8}
        entries = [DeviceProcesses(GPU, pids, sm if rng.random() < 0.8 else None, 0)]
        shares = shares_of(entries, held_by(*rng.sample("abcd", rng.randrange(0, 5))))
        delta = rng.randrange(0, 10**9)
        for policy in (SPLIT, UNATTRIBUTED):
            split = split_gpu_energy(delta, shares.devices, policy)
            assert sum(split.holders.values()) + sum(split.unattributed.values()) == delta


def test_the_ledger_adds_each_delta_drops_leavers_and_counts_idle_time():
    ledger = ShareLedger(SPLIT)
    first = shares_of([DeviceProcesses(GPU, {101: 1}, {101: 0.5}, 1_000_000)], held_by("a", "b"))
    counters = ledger.update(first, PODS, now=100.0)  # the first reading only sets the baseline
    assert counters.holder_energy_mj == {(GPU, owner("a")): 0, (GPU, owner("b")): 0}
    assert counters.idle_seconds == {(GPU, owner("a")): 0.0, (GPU, owner("b")): 0.0}
    second = shares_of([DeviceProcesses(GPU, {101: 1}, {101: 0.5}, 1_001_000)], held_by("a", "b"))
    counters = ledger.update(second, PODS, now=105.0)
    assert counters.holder_energy_mj == {(GPU, owner("a")): 750, (GPU, owner("b")): 250}
    assert counters.idle_seconds == {(GPU, owner("a")): 0.0, (GPU, owner("b")): 5.0}  # b held it with no process
    third = shares_of([DeviceProcesses(GPU, {101: 1}, {101: 0.5}, 1_003_000)], held_by("a", "c"))  # b left, c came
    counters = ledger.update(third, PODS, now=107.0)
    assert counters.holder_energy_mj == {(GPU, owner("a")): 2250, (GPU, owner("c")): 500}
    assert counters.idle_seconds == {(GPU, owner("a")): 0.0, (GPU, owner("c")): 0.0}
    # c's pod re-created under the same name (a new UID) between two refreshes is a new holder: its
    # counter starts again from 0 rather than carrying on the old pod's 500 mJ.
    reborn = {**PODS, "ffffffff-0000-4000-8000-000000000000": PODS[UIDS["c"]]}
    del reborn[UIDS["c"]]
    fourth = shares_of([DeviceProcesses(GPU, {101: 1}, {101: 0.5}, 1_004_000)], held_by("a", "c"), reborn)
    counters = ledger.update(fourth, reborn, now=108.0)
    assert counters.holder_energy_mj == {(GPU, owner("a")): 3000, (GPU, owner("c")): 250}
    assert counters.idle_seconds == {(GPU, owner("a")): 0.0, (GPU, owner("c")): 0.0}


def test_a_counter_that_goes_back_only_sets_a_new_baseline():
    ledger = ShareLedger(SPLIT)
    for energy in (5000, 9000, 100, 600):  # the driver reloaded between the second and third reading
        counters = ledger.update(shares_of([DeviceProcesses(GPU, {}, {}, energy)], held_by("a")), PODS, 0.0)
    assert counters.holder_energy_mj == {(GPU, owner("a")): 4000 + 500}


def test_a_gpu_without_energy_has_no_energy_counters_but_idle_seconds():
    ledger = ShareLedger(SPLIT)
    counters = ledger.update(shares_of([DeviceProcesses(GPU, {}, {}, None)], held_by("a")), PODS, 0.0)
    assert counters.holder_energy_mj == {} and counters.unattributed_energy_mj == {}
    assert counters.idle_seconds == {(GPU, owner("a")): 0.0}


def test_a_holder_whose_pod_the_api_learns_late_keeps_its_counters():
    ledger = ShareLedger(SPLIT)
    unknown = {uid: pod for uid, pod in PODS.items() if pod.pod != "a"}  # a's pod not yet seen by the API
    for energy, pods in ((1000, unknown), (3000, unknown), (4000, PODS)):
        counters = ledger.update(shares_of([DeviceProcesses(GPU, {}, {}, energy)], held_by("a"), pods), pods, 0.0)
    assert counters.holder_energy_mj == {(GPU, owner("a")): 3000}  # never back to 0 while it holds the GPU


def test_a_gpu_nvml_misses_for_a_while_keeps_its_counters_then_forgets_them():
    from exporter.vendors.nvidia.shares.ledger import FORGET_UNREAD_AFTER_REFRESHES

    ledger = ShareLedger(SPLIT)
    other = GpuIdentity("GPU-66666666-7777-8888-9999-aaaaaaaaaaaa", "1", "nvidia1", "")
    both = held_by("a") + held_by("b", device_id=other.uuid)
    for energy in (1000, 3000):
        ledger.update(shares_of([DeviceProcesses(GPU, {}, {}, energy), DeviceProcesses(other, {}, {}, energy)], both),
                      PODS, 0.0)
    lost = shares_of([DeviceProcesses(other, {}, {}, 4000)], both)  # GPU 0 lost for a refresh: not read
    counters = ledger.update(lost, PODS, 1.0)
    back = shares_of([DeviceProcesses(GPU, {}, {}, 3500), DeviceProcesses(other, {}, {}, 4000)], both)
    counters = ledger.update(back, PODS, 2.0)
    assert counters.holder_energy_mj[(GPU, owner("a"))] == 2500  # carried on, not restarted
    for _ in range(FORGET_UNREAD_AFTER_REFRESHES + 1):
        counters = ledger.update(lost, PODS, 3.0)
    assert (GPU, owner("a")) not in counters.holder_energy_mj and (GPU, NO_HOLDER) not in counters.unattributed_energy_mj
    assert counters.holder_energy_mj[(other, owner("b"))] == 3000
