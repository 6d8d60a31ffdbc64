"""Readers of process-mode scrapes that check the share invariants: memory that adds up to what NVML listed,
SM that adds up to at most 1, energy counters that grow by exactly the board's energy delta and never go down."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Dict, FrozenSet, Iterable, List, Mapping, Tuple

Labels = FrozenSet[Tuple[str, str]]
DeviceKey = Tuple[str, str]  # (UUID, GPU_I_ID or "")

MEMORY = ("pod_gpu_container_memory_used_bytes", "pod_gpu_unattributed_memory_used_bytes")
SM = ("pod_gpu_container_sm_utilization_ratio", "pod_gpu_unattributed_sm_utilization_ratio")
ENERGY = ("pod_gpu_container_energy_joules_total", "pod_gpu_unattributed_energy_joules_total")
IDLE = "pod_gpu_container_idle_seconds_total"
COUNTERS = ENERGY + (IDLE,)
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> Dict[str, Dict[Labels, Decimal]]:
    """family → labels → value (Decimal, so sums are exact) for every sample of the text."""
    samples: Dict[str, Dict[Labels, Decimal]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "{" not in line:
            continue
        name, _, rest = line.partition("{")
        labels, _, value = rest.rpartition("} ")
        samples.setdefault(name, {})[frozenset(_LABEL.findall(labels))] = Decimal(value)
    return samples


def device_of(labels: Labels) -> DeviceKey:
    named = dict(labels)
    return named["UUID"], named.get("GPU_I_ID", "")


def per_device(samples: Mapping[str, Mapping[Labels, Decimal]], families: Iterable[str]) -> Dict[DeviceKey, Decimal]:
    totals: Dict[DeviceKey, Decimal] = {}
    for family in families:
        for labels, value in samples.get(family, {}).items():
            totals[device_of(labels)] = totals.get(device_of(labels), Decimal(0)) + value
    return totals


def holders(samples: Mapping[str, Mapping[Labels, Decimal]]) -> Dict[DeviceKey, FrozenSet[str]]:
    """Per device, the pods with a memory share series: who holds it in that refresh."""
    found: Dict[DeviceKey, set] = {}
    for labels in samples.get(MEMORY[0], {}):
        found.setdefault(device_of(labels), set()).add(dict(labels)["pod"])
    return {device: frozenset(pods) for device, pods in found.items()}


def check_memory_and_sm(samples, listed_memory: Mapping[DeviceKey, int]) -> None:
    """Holders + remainders = all process memory NVML listed, per device, exactly; SM adds up to at most 1."""
    assert per_device(samples, MEMORY) == {device: Decimal(total) for device, total in listed_memory.items()}
    for device, total in per_device(samples, SM).items():
        assert total <= 1, f"SM shares of {device} add up to {total}"


def check_counters(before, after, energy_delta_mj: Mapping[str, int]) -> None:
    """Between two refreshes: no counter goes down; per GPU, the energy series present after grew (from 0
    when new) by exactly the board's delta, to the millijoule."""
    for family in COUNTERS:
        for labels, value in after.get(family, {}).items():
            previous = before.get(family, {}).get(labels)
            assert previous is None or value >= previous, f"{family}{dict(labels)} went down: {previous} → {value}"
    growth: Dict[str, Decimal] = {}
    for (uuid, _instance), joules in energy_growth(before, after).items():
        growth[uuid] = growth.get(uuid, Decimal(0)) + joules
    expected = {uuid: Decimal(delta) / 1000 for uuid, delta in energy_delta_mj.items()}
    assert growth == expected, f"energy grew by {growth}, the boards by {expected}"


def energy_growth(before, after) -> Dict[DeviceKey, Decimal]:
    """Per device, how much its energy series present after grew since before (a new one from 0), in J."""
    growth: Dict[DeviceKey, Decimal] = {}
    for family in ENERGY:
        for labels, value in after.get(family, {}).items():
            device = device_of(labels)
            growth[device] = growth.get(device, Decimal(0)) + value - before.get(family, {}).get(labels, Decimal(0))
    return growth


_SHARE_PREFIXES = ("pod_gpu_container_", "pod_gpu_unattributed_", "pod_gpu_unallocated_")


def distinct(texts: Iterable[str]) -> List[str]:
    """The scrapes whose share series differ from the one before: one per refresh seen."""
    seen: List[str] = []
    for text in texts:
        shares = "\n".join(line for line in text.splitlines() if line.startswith(_SHARE_PREFIXES))
        if shares and (not seen or shares != seen[-1]):
            seen.append(shares)
    return seen


UNALLOCATED = {"pod_gpu_unattributed_memory_used_bytes": "pod_gpu_unallocated_memory_used_bytes",
               "pod_gpu_unattributed_sm_utilization_ratio": "pod_gpu_unallocated_sm_utilization_ratio"}


def check_unallocated_breakdown(samples, named_exactly: bool = False) -> None:
    """Per device, the unallocated series add up to at most reason="not_holder" (exactly when every process
    of it is a container the API names: `named_exactly`), and a device without a not_holder remainder has none."""
    for remainder, breakdown in UNALLOCATED.items():
        not_holder = {device_of(labels): value for labels, value in samples.get(remainder, {}).items()
                      if dict(labels)["reason"] == "not_holder"}
        for device, total in per_device(samples, (breakdown,)).items():
            assert device in not_holder, f"{breakdown} on {device} without a not_holder remainder"
            assert total == not_holder[device] if named_exactly else total <= not_holder[device], (
                f"{breakdown} of {device} adds up to {total}, not_holder is {not_holder[device]}")
