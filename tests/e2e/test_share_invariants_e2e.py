"""The share invariants on every refresh the real exporter makes while pods arrive, leave and share GPUs
(time-slicing, MPS, MIG, an exclusive GPU, an unheld GPU), read through the real nvidia-ml-py over the
fake libnvidia-ml.so.1 in C: memory adds up to what NVML listed, SM to at most 1, energy to the mJ."""

from __future__ import annotations

import subprocess
import threading
from decimal import Decimal
from typing import Dict, List, Optional, Tuple

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.scrape_checks import assert_parses, scrape
from support.share_invariants import (
    IDLE,
    check_counters,
    check_memory_and_sm,
    check_unallocated_breakdown,
    distinct,
    energy_growth,
    holders,
    parse_samples,
)
from support.shared_node import MIB
from support.waiting import wait_until

TS, MPS, MIGGPU, EXCL, NOBODY = (f"GPU-{index:08x}-1111-4222-8333-{index:012x}" for index in range(5))
MIG1, MIG5, MIG6 = (f"MIG-{gi:08x}-aaaa-4bbb-8ccc-{gi:012x}" for gi in (1, 5, 6))
INSTANCES = {MIG1: ("1", 4), MIG5: ("5", 2), MIG6: ("6", 1)}  # GPU instance, memory slices
INDEX = {TS: "0", MPS: "1", MIGGPU: "2", EXCL: "3", NOBODY: "4"}
MARKER_PID = 4242  # a host process on the unheld GPU whose memory tells which node version a refresh read
LAST = 5


def mig_id(mig: str, replica: Optional[int] = None) -> str:
    device_id = f"MIG-GPU-{MIGGPU[4:]}/{INSTANCES[mig][0]}/0"
    return device_id if replica is None else f"{device_id}::{replica}"


def holders_at(version: int) -> List[Tuple[str, str]]:
    """(pod, kubelet device ID) held at a version: b and g leave, late arrives, i leaves its exclusive GPU."""
    held = [("a", f"{TS}::0"), ("c", f"{TS}::2"), ("d", f"{MPS}::0"), ("e", f"{MPS}::1"), ("f", mig_id(MIG1)),
            ("h", mig_id(MIG5, 1))]
    held += [("b", f"{TS}::1")] if version < 2 else [("late", f"{TS}::3")]
    held += [("g", mig_id(MIG5, 0))] if version < 3 else []
    held += [("i", EXCL)] if version < LAST else []
    return held


def processes_at(v: int) -> List[Tuple[str, str, int, str, int, Optional[int]]]:
    """(device UUID, pod or "" for the host, PID, kind, bytes, SM % or None) listed by NVML at a version."""
    listed = [(TS, "a", 101, "compute", (1000 + v) * MIB, 20 + 15 * v),  # with late's 30 % over 100 % at v3
              (TS, "a", 102, "compute", 50 * MIB + v, 5), (TS, "stray", 501, "compute", 7 * MIB, 3),
              (TS, "", 1, "graphics", 5 * MIB, None), (EXCL, "stray", 502, "compute", 9 * MIB, 2),
              (MPS, "", 600, "compute", 40 * MIB, None), (MPS, "d", 701, "mps", 2000 * MIB, 60 - v),
              (MPS, "d", 701, "compute", 2000 * MIB, None),  # an MPS client in two lists: counted once
              (MPS, "e", 702, "mps", 500 * MIB + v, 25), (MIG1, "f", 801, "compute", 3000 * MIB, None),
              (MIG6, "", 601, "compute", 11 * MIB, None), (NOBODY, "", MARKER_PID, "compute", (v + 1) * MIB, 7)]
    listed += [(TS, "b", 201, "compute", 300 * MIB, 10 + v)] if v < 3 else []  # runs on after b let go at v2
    listed += [(TS, "c", 301, "compute", 64 * MIB, 12)] if v >= 4 else []
    listed += [(TS, "late", 401, "compute", 200 * MIB * v, 30)] if v >= 2 else []
    listed += [(MIG5, "g", 901, "compute", 700 * MIB, None)] if v < 3 else []
    listed += [(MIG5, "h", 902, "compute", 800 * MIB + v, None)] if v >= 1 else []
    listed += [(EXCL, "i", 1001, "compute", 4000 * MIB, 90)] if v < LAST else []
    return listed


def energy_at(version: int) -> Dict[str, int]:
    """Each board's energy counter (mJ): moving by odd amounts, so that every split leaves remainders."""
    return {uuid: 10**9 * (n + 1) + sum(1_000_003 * (n + 1) + 7919 * k * k for k in range(1, version + 1))
            for n, uuid in enumerate(INDEX)}


def device_key(uuid: str) -> Tuple[str, str]:
    return (MIGGPU, INSTANCES[uuid][0]) if uuid in INSTANCES else (uuid, "")


def listed_memory(version: int) -> Dict[Tuple[str, str], int]:
    per_pid = {(device_key(uuid), pid): used for uuid, _pod, pid, _kind, used, _sm in processes_at(version)}
    totals = {device_key(uuid): 0 for uuid in [*INDEX, *INSTANCES] if uuid != MIGGPU}
    for (device, _pid), used in per_pid.items():
        totals[device] += used
    return totals


def write_nvml(gpu_node, version: int) -> None:
    node = gpu_node.nvml
    node.lines = []
    for uuid, index in INDEX.items():
        node.gpu(int(index), uuid)
    for mig, (instance, slices) in INSTANCES.items():
        node.mig(int(INDEX[MIGGPU]), int(instance), mig, slices=slices)
    for uuid, millijoules in energy_at(version).items():
        node.energy(uuid, millijoules)
    for uuid, _pod, pid, kind, used, sm in processes_at(version):
        node.process(uuid, pid, used, kind=kind)
        if sm is not None:
            node.sample(uuid, pid, sm)
    node.write()


def write_proc(gpu_node, version: int) -> None:
    """The /proc entries of the version's processes (pods first created in the API when new)."""
    for _uuid, pod, pid, *_ in processes_at(version):
        if not pod:
            gpu_node.proc.host_process(pid)
            continue
        if pod not in gpu_node.pods:
            gpu_node.add_pod(pod)
        gpu_node.run_in(pid, pod)


def set_holders(gpu_node, version: int) -> None:
    for pod, _device in holders_at(version):
        if pod not in gpu_node.pods:
            gpu_node.add_pod(pod)
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", device)
                                  for pod, device in holders_at(version)])


def expected_holders(version: int):
    found: Dict[Tuple[str, str], set] = {}
    for pod, device_id in holders_at(version):
        if device_id.startswith("MIG-GPU-"):
            key = (MIGGPU, device_id.split("/")[1])
        else:
            key = (device_id.partition("::")[0], "")
        found.setdefault(key, set()).add(pod)
    return {device: frozenset(pods) for device, pods in found.items()}


class Scraper:
    """Scrapes as fast as it can on its own thread, keeping every answer, while the test moves the node."""

    def __init__(self, exporter):
        self.exporter = exporter
        self.texts: List[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.texts.append(scrape(self.exporter).text)

    def latest(self):
        return parse_samples(self.texts[-1]) if self.texts else {}

    def stop(self) -> List[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.texts


def version_of(samples) -> Optional[int]:
    for labels, value in samples.get("pod_gpu_unattributed_memory_used_bytes", {}).items():
        named = dict(labels)
        if named["UUID"] == NOBODY and named["reason"] == "host":
            return int(value) // MIB - 1
    return None


@pytest.mark.parametrize("policy", ["split", "unattributed"])
def test_every_refresh_adds_up_while_pods_arrive_leave_and_share(gpu_node, policy):
    gpu_node.add_pod("stray")  # a pod holding no GPU, with processes on two
    set_holders(gpu_node, 0)
    write_proc(gpu_node, 0)
    write_nvml(gpu_node, 0)
    scraper = Scraper(gpu_node.start(extra=["--energy.idle-policy", policy]))
    try:
        wait_until(lambda: version_of(scraper.latest()) == 0 and holders(scraper.latest()) == expected_holders(0))
        for version in range(1, LAST + 1):
            if holders_at(version) != holders_at(version - 1):  # holders move first, at the same NVML snapshot
                set_holders(gpu_node, version)
                wait_until(lambda: holders(scraper.latest()) == expected_holders(version))
            for pod in ("b",) if version == 3 else ():  # b's process has exited; its pod is gone
                gpu_node.proc.remove(201)
                gpu_node.api.delete("v1", "pods", "ml", pod)
            write_proc(gpu_node, version)
            write_nvml(gpu_node, version)
            wait_until(lambda: version_of(scraper.latest()) == version)
    finally:
        texts = scraper.stop()
    refreshes = [parse_samples(text) for text in distinct(texts)]
    # The exporter serves before its first NVML read is done (it listens first): the scrapes from
    # before then carry no shares at all, and are left out; after it, every one must.
    while refreshes and version_of(refreshes[0]) is None:
        refreshes.pop(0)
    assert len(refreshes) > LAST, len(refreshes)  # at least one per version, usually several
    versions = [version_of(samples) for samples in refreshes]
    assert sorted(set(versions)) == list(range(LAST + 1))
    for samples, version in zip(refreshes, versions):
        check_memory_and_sm(samples, listed_memory(version))
        check_unallocated_breakdown(samples, named_exactly=True)  # every pod here is in the API
        assert {dict(labels)["pod"] for labels in samples["pod_gpu_unallocated_memory_used_bytes"]} >= {"stray"}
    by_instance: Dict[str, Decimal] = {}
    for (before, old), (after, new) in zip(zip(refreshes, versions), zip(refreshes[1:], versions[1:])):
        check_counters(before, after, {uuid: energy_at(new)[uuid] - energy_at(old)[uuid] for uuid in INDEX})
        for (uuid, instance), joules in energy_growth(before, after).items():
            if uuid == MIGGPU:
                by_instance[instance] = by_instance.get(instance, Decimal(0)) + joules
    # The MIG GPU's energy went to its instances by the memory slices NVML gave their profiles (4:2:1),
    # each refresh's split rounded to the millijoule.
    board = Decimal(energy_at(versions[-1])[MIGGPU] - energy_at(versions[0])[MIGGPU]) / 1000
    for instance, slices in (("1", 4), ("5", 2), ("6", 1)):
        assert abs(by_instance[instance] - board * slices / 7) <= Decimal(len(refreshes)) / 1000, by_instance
    last = refreshes[-1]
    idle = {dict(labels)["pod"]: value for labels, value in last[IDLE].items()}
    assert idle["a"] == 0 and idle["c"] > 0  # c held its replica with no process until the fourth version
    idle_energy = sum(value for labels, value in last["pod_gpu_unattributed_energy_joules_total"].items()
                      if dict(labels)["reason"] == "idle")
    assert (idle_energy > 0) == (policy == "unattributed")
    no_holder = {dict(labels)["UUID"] + dict(labels).get("GPU_I_ID", "") for labels, value
                 in last["pod_gpu_unattributed_energy_joules_total"].items()
                 if dict(labels)["reason"] == "no_holder" and value > 0}
    assert no_holder == {NOBODY, MIGGPU + "6", EXCL}  # EXCL once i let it go
    assert_parses(texts[-1])


def test_a_bad_idle_policy_stops_start_up_with_exit_2():
    from support.exporter_process import REPO_ROOT, exporter_command, exporter_env

    env = {**exporter_env(), "POD_GPU_EXPORTER_ENERGY_IDLE_POLICY": "even"}
    result = subprocess.run(exporter_command() + ["--sharing.mode", "process"], cwd=str(REPO_ROOT), env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "pod-gpu-metrics-exporter: error: POD_GPU_EXPORTER_ENERGY_IDLE_POLICY: invalid choice 'even' "
        "(choose from split, unattributed)"]
