"""An NVIDIA node's /gpu/metrics answer made in this process: the real Scraper, rewrite and sections over a dcgm body,
the kubelet's devices and, for --sharing.mode process, one reading of NVML's shares (served as their own block is,
and handed to each pod's numbers as the process-shares collector hands them); and readers of both new families."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from prometheus_client.parser import text_string_to_metric_families

from exporter.core.attribution import Attribution
from exporter.core.identity import GpuIdentity, Owner
from exporter.core.offered import OfferedReplicas
from exporter.exposition.allocation import AllocationSection
from exporter.exposition.families import POD_MEMORY, POD_UTILIZATION
from exporter.exposition.pod_numbers import PodNumbersSection
from exporter.exposition.sections import SectionState, StatusSection, TextSection
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia import NVIDIA
from exporter.vendors.nvidia.collectors.process_shares import holder_uses
from exporter.vendors.nvidia.dcgm.file_source import FileSource
from exporter.vendors.nvidia.dcgm.options import DcgmFileOptions
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.shares.compute import SM_UNITS, DeviceShares, HolderShare, Shares
from exporter.vendors.nvidia.shares.render import render_shares
from exporter.web.scrape import Scraper
from support.fixtures import fixture_bytes

MIB = 1024 * 1024
# DCGM's blank sentinel for a field it cannot read: no percentage.
BLANK = "9223372036854775794"


def with_values(body: bytes, family: str, values: Dict[Tuple[str, str], str]) -> bytes:
    """`body` with the samples of `family` naming (gpu, GPU_I_ID) set to these values ("" for a whole GPU)."""
    def replace(match: re.Match) -> bytes:
        key = _device(match.group(2).decode())
        return match.group(1) + (values[key].encode() if key in values else match.group(3))

    return re.sub(rb"(?m)^(" + family.encode() + rb"\{(.*)\} )(\S+)$", replace, body)


def added_family(body: bytes, template_family: str, family: str, values: Dict[Tuple[str, str], str]) -> bytes:
    """`body` with `family` added: one gauge sample per (gpu, GPU_I_ID) of `values`, labelled as the
    template family's sample of that device (as dcgm-exporter labels every field of a device alike)."""
    lines = [f"# HELP {family} added for this test", f"# TYPE {family} gauge"]
    for line in body.decode().splitlines():
        if not line.startswith(template_family + "{"):
            continue
        labels = line[len(template_family) + 1 : line.rindex("}")]
        key = _device(labels)
        if key in values:
            lines.append(f"{family}{{{labels}}} {values[key]}")
    return body + ("\n".join(lines) + "\n").encode()


def _device(labels: str) -> Tuple[str, str]:
    """(gpu, GPU_I_ID or "") a sample's label text names."""
    found = dict(re.findall(r'\b(gpu|GPU_I_ID)="([^"]*)"', labels))
    return found.get("gpu", ""), found.get("GPU_I_ID", "")


class _Kubelet:
    def __init__(self, devices: Iterable[AllocatedDevice], offered: Sequence[Tuple[str, str]]):
        self.devices, self.offered = list(devices), list(offered)

    def list_devices(self):
        return list(self.devices)

    def list_offered(self):
        return list(self.offered)


def shares_of(holders: Iterable[Tuple[GpuIdentity, Owner, int, Optional[float]]]) -> Shares:
    """One NVML reading: (device, holder, memory bytes, SM ratio or None) per holder, nothing left to no holder."""
    by_device: Dict[GpuIdentity, List[HolderShare]] = {}
    for device, owner, memory, sm in holders:
        units = None if sm is None else round(sm * SM_UNITS)
        by_device.setdefault(device, []).append(HolderShare(device, owner, memory, units, 1 if sm else 0))
    return Shares(tuple(DeviceShares(device, tuple(shares), ()) for device, shares in by_device.items()))


def served(folder: Path, body: bytes, devices: Iterable[AllocatedDevice], shares: Optional[Shares] = None,
           offered: Sequence[Tuple[str, str]] = (), style: str = "kubernetes", mode: str = "samples") -> str:
    """The answer a node serves for `body` and the kubelet's `devices` (`offered`: the replicas its device
    plugins offer); with `shares`, the process-mode blocks of that reading and each pod's numbers made from it."""
    return node_scraper(folder, body, devices, shares, offered, style, mode).scrape().decode()


def node_scraper(folder: Path, body: bytes, devices: Iterable[AllocatedDevice], shares: Optional[Shares] = None,
                 offered: Sequence[Tuple[str, str]] = (), style: str = "kubernetes", mode: str = "samples") -> Scraper:
    """The Scraper of `served`, reading the dcgm body from folder/dcgm.prom (a test may write a new one)."""
    path = folder / "dcgm.prom"
    path.write_bytes(body)
    kubelet = _Kubelet(devices, offered)
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=60, max_age_seconds=600,
                              offered=OfferedReplicas(kubelet.list_offered, DEVICE_FORMS))
    attribution.refresh()
    allocation = AllocationSection(style, None, lambda: True, NVIDIA.figures)
    per_scrape = []
    if shares is not None:
        text = render_shares(shares, style).encode()
        per_scrape.append(TextSection("process_shares", lambda: text, lambda: SectionState(True)))
    numbers = PodNumbersSection(style, None, NVIDIA.figures, allocation.gpu_memory_mib,
                                lambda: None if shares is None else holder_uses(shares))
    return Scraper(FileSource(DcgmFileOptions(str(path))), attribution, style,
                   [allocation, StatusSection(NVIDIA.status), *per_scrape, numbers], labels_mode=mode)


def pod_utilization(text: str) -> Dict[Tuple[str, str], float]:
    """(namespace, pod) → pod_gpu_utilization_ratio as served."""
    return {(s.labels["namespace"], s.labels["pod"]): s.value for s in _samples(text, POD_UTILIZATION.name)}


def container_memory(text: str) -> Dict[Tuple[str, str, str], float]:
    """(namespace, pod, container) → pod_gpu_memory_used_bytes as served."""
    return {(s.labels["namespace"], s.labels["pod"], s.labels["container"]): s.value
            for s in _samples(text, POD_MEMORY.name)}


def _samples(text: str, name: str):
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name]


# --- the cases: the A800 MIG node's real scrape, with utilisations set --------------------------------------
A800 = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"
UUIDS = {0: "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418", 1: "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6",
         2: "GPU-5022ce43-b44a-987b-71c3-dee05378a618", 3: "GPU-f22db14d-1597-8eb1-78dc-d93765918c73",
         4: "GPU-a878a9f3-cf6d-b94c-38ba-892ed140c7ee", 5: "GPU-a1dd6923-de62-e22b-c882-4d6f7e1ec5ce",
         6: "GPU-c07eb90d-74b0-d3b4-e6ce-f18687564243", 7: "GPU-4e75c9ab-0ed7-8a57-75f5-23761b9f053f"}
# The A800 scrape with utilisations set: whole GPUs 1-6 busy, GPU 7 blank (DCGM's sentinel); the MIG instances
# of GPU 0 (3, 5, 6) with their engine-active ratio, as dcgm-exporter's profiling counters give it.
UTIL = {("1", ""): "30", ("2", ""): "60", ("3", ""): "90", ("4", ""): "20", ("5", ""): "50", ("6", ""): "70",
        ("7", ""): BLANK}
ENGINE = {("0", "3"): "0.25", ("0", "5"): "0.75", ("0", "6"): "0.5"}


def a800_body() -> bytes:
    body = with_values(fixture_bytes(A800), "DCGM_FI_DEV_GPU_UTIL", UTIL)
    return added_family(body, "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", ENGINE)


def gpu(index: int, ns: str, pod: str, container: str, suffix: str = "") -> AllocatedDevice:
    return AllocatedDevice(ns, pod, container, "nvidia.com/gpu", UUIDS[index] + suffix)


def mig(instance: int, ns: str, pod: str, container: str) -> AllocatedDevice:
    return AllocatedDevice(ns, pod, container, "nvidia.com/mig-2g.20gb", f"MIG-{UUIDS[0]}/{instance}/0")


A800_DEVICES = [
    gpu(1, "ml", "mixed", "a"),  # two containers holding different numbers of GPUs: 1 and 2
    gpu(2, "ml", "mixed", "b"),
    gpu(3, "ml", "mixed", "b"),
    mig(3, "ml", "mig", "main"),  # two MIG instances of GPU 0
    mig(5, "ml", "mig", "main"),
    gpu(4, "ml", "pair", "x"),  # one GPU, both containers of one pod (a claim they share)
    gpu(4, "ml", "pair", "y"),
    gpu(5, "web", "s1", "main"),  # one GPU, two pods
    gpu(5, "web", "s2", "main"),
    gpu(6, "web", "ts", "main", "::0"),  # a time-slicing replica, its GPU offered twice
    gpu(7, "ml", "blank", "main"),  # DCGM cannot read its utilisation
]
A800_OFFERED = [("nvidia.com/gpu", UUIDS[6] + "::0"), ("nvidia.com/gpu", UUIDS[6] + "::1")]


def identity(index: int, instance: str = "") -> GpuIdentity:
    return GpuIdentity(UUIDS[index], str(index), f"nvidia{index}", instance)


def process_case():
    """(devices, offered, shares) of a process-mode A800 node: a pod whose two containers hold 1 and 2 GPUs, two
    pods on half shares of a time-sliced GPU, one holding a GPU and running nothing, one on a MIG instance."""
    devices = [gpu(1, "ml", "mixed", "a"), gpu(2, "ml", "mixed", "b"), gpu(3, "ml", "mixed", "b"),
               gpu(6, "web", "ts-a", "main", "::0"), gpu(6, "web", "ts-b", "main", "::1"),
               gpu(4, "ml", "idle", "main"), mig(3, "ml", "mig", "main")]
    offered = [("nvidia.com/gpu", UUIDS[6] + "::0"), ("nvidia.com/gpu", UUIDS[6] + "::1")]
    mixed_a, mixed_b = Owner("ml", "mixed", "a"), Owner("ml", "mixed", "b")
    shares = shares_of([
        (identity(1), mixed_a, 300 * MIB, 0.4), (identity(2), mixed_b, 100 * MIB, 0.1), (identity(3), mixed_b, 0, 0.0),
        (identity(6), Owner("web", "ts-a", "main"), 500 * MIB, 0.7), (identity(6), Owner("web", "ts-b", "main"), 7 * MIB, 0.2),
        (identity(4), Owner("ml", "idle", "main"), 0, 0.0),  # holds a GPU, runs nothing there
        (identity(0, "3"), Owner("ml", "mig", "main"), 9 * MIB, None),  # NVML gives no SM share on MIG
    ])
    return devices, offered, shares
