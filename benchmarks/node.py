"""A synthetic GPU node for the benchmark: dcgm-exporter text and kubelet allocations built from real scrapes.

How the node is built (so the figures can be judged):
- Label shape and GPUs: exactly those of the real H100 MIG scrape
  (tests/data/dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom): its 8 GPUs' UUIDs,
  PCI bus IDs, model name and host name, labels in its order, `GPU_I_PROFILE="1g.10gb"` on instance
  series. An H100 80GB splits into 7 `1g.10gb` instances; they get GPU instance IDs 7-13.
- Families: first every `DCGM_FI_*` family of the real scrapes in tests/data/dcgm, with HELP and TYPE
  exactly as written there; then the other fields named in dcgm-exporter's default counter lists
  (etc/default-counters.csv and etc/dcp-metrics-included.csv, commented-out ones included); then, to
  reach 100, DCGM's per-link NVLink fields for 18 links (`DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n>`, then
  `…_CRC_FLIT_ERROR_COUNT_L<n>`, `…_CRC_DATA_ERROR_COUNT_L<n>`), which a custom counter list can collect.
- Series: every family has one series per MIG instance (8 x 7) and one per parent GPU (8): 64 per
  family, 6,400 at 100 families (the issue's "about 6,400 series"). Values are dcgm-style text:
  integers for counters and most gauges, `%f` for fractional ones, as up to dcgm-exporter 4.8.2.
- Every MIG instance belongs to a pod, listed as `MIG-GPU-<uuid>/<gi>/0` (`nvidia.com/mig-1g.10gb`);
  on a node without MIG every GPU belongs to a pod, listed by UUID.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List, NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from exporter.sources.kubelet import AllocatedDevice  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "data" / "dcgm"
H100_FIXTURE = FIXTURES / "repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom"
MIG_PROFILE = "1g.10gb"
MIG_INSTANCE_IDS = ("7", "8", "9", "10", "11", "12", "13")

# Fields of dcgm-exporter's default counter lists that the scrapes in tests/data do not show.
_DEFAULT_LIST_FIELDS = (
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "Total number of bytes transmitted through PCIe TX (in KB) via NVML."),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "Total number of bytes received through PCIe RX (in KB) via NVML."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."),
    ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "Throttling duration due to sync-boost constraints (in us)."),
    ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "counter", "Throttling duration due to board limit constraints (in us)."),
    ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "Throttling duration due to low utilization (in us)."),
    ("DCGM_FI_DEV_RELIABILITY_VIOLATION", "counter", "Throttling duration due to reliability constraints (in us)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors."),
    ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors."),
    ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
)
_NVLINK_LINKS = 18  # NVLink links of an H100 SXM
_HELP_TYPE = re.compile(r"# (HELP|TYPE) (DCGM_FI_\w+) (.*)")
_SAMPLE_LABELS = re.compile(r'(\w+)="([^"]*)"')


class Family(NamedTuple):
    name: str
    kind: str  # the TYPE as written
    help: str


class Gpu(NamedTuple):
    index: int
    uuid: str
    pci_bus_id: str
    model: str
    hostname: str


class Shape(NamedTuple):
    gpus: int
    instances_per_gpu: int  # 0: whole GPUs only, no MIG
    families: int


def family_catalogue() -> List[Family]:
    """DCGM families in the order described in the module docstring, without repeats."""
    seen: dict = {}
    for path in sorted(FIXTURES.glob("*.prom")):
        help_text: dict = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _HELP_TYPE.fullmatch(line)
            if not match:
                continue
            kind, name, rest = match.groups()
            if kind == "HELP":
                help_text[name] = rest
            elif name in help_text and name not in seen:
                seen[name] = Family(name, rest.strip(), help_text[name])
    for name, kind, text in _DEFAULT_LIST_FIELDS:
        seen.setdefault(name, Family(name, kind, text))
    link_fields = [("DCGM_FI_DEV_NVLINK_BANDWIDTH_L{}", "The number of bytes of active NVLink rx or tx data including both header and payload (link {})."),
                   ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{}", "NVLink flow-control CRC errors (link {})."),
                   ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{}", "NVLink data CRC errors (link {}).")]
    for pattern, text in link_fields:
        for link in range(_NVLINK_LINKS):
            name = pattern.format(link)
            seen.setdefault(name, Family(name, "counter", text.format(link)))
    return list(seen.values())


def fixture_gpus(count: int = 8) -> List[Gpu]:
    """The 8 GPUs of the real H100 scrape, in index order; more (a 32-GPU node of the largest
    shape) are copies of them with their own index, UUID and PCI address."""
    gpus: dict = {}
    for line in H100_FIXTURE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        labels = dict(_SAMPLE_LABELS.findall(line))
        index = int(labels["gpu"])
        gpus.setdefault(index, Gpu(index, labels["UUID"], labels["pci_bus_id"], labels["modelName"], labels["Hostname"]))
    real = [gpus[index] for index in sorted(gpus)]
    copies = [real[index % len(real)] for index in range(len(real), count)]
    return real + [gpu._replace(index=index, uuid=f"{gpu.uuid[:-4]}{index:04x}", pci_bus_id=f"{gpu.pci_bus_id[:-7]}{index:02X}:00.0")
                   for index, gpu in enumerate(copies, start=len(real))]


# The label that pads a series to more bytes (Node's padding_bytes): a name no dcgm-exporter writes.
PADDING_LABEL = "padding"


class Node:
    """Renders the node's dcgm text; `render(generation)` moves every value with the generation.

    `padding_bytes`: each series' labels begin with `padding="ppp…",`, this many bytes in all (at least the bare
    label's 11), to compare a body of longer lines with the same series (benchmarks/perf.py --amd)."""

    def __init__(self, shape: Shape, padding_bytes: int = 0):
        catalogue = family_catalogue()
        gpus = fixture_gpus(shape.gpus)
        if shape.families > len(catalogue) or shape.instances_per_gpu > len(MIG_INSTANCE_IDS):
            raise ValueError(f"shape {shape} is larger than the fixtures allow")
        self.shape = shape
        self.families = catalogue[: shape.families]
        self.gpus = gpus[: shape.gpus]
        self.instances = MIG_INSTANCE_IDS[: shape.instances_per_gpu]
        bare = len(f'{PADDING_LABEL}="",')
        self._padding = f'{PADDING_LABEL}="{"p" * (padding_bytes - bare)}",' if padding_bytes >= bare else ""
        # Label text per series, rendered once: only values change from one collection to the next.
        self._label_texts = [self._labels(gpu, instance) for gpu in self.gpus for instance in ("",) + self.instances]

    @property
    def series(self) -> int:
        return len(self.families) * len(self._label_texts)

    def _labels(self, gpu: Gpu, instance: str) -> str:
        mig = f',GPU_I_PROFILE="{MIG_PROFILE}",GPU_I_ID="{instance}"' if instance else ""
        return (f'{self._padding}gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",device="nvidia{gpu.index}",'
                f'modelName="{gpu.model}"{mig},Hostname="{gpu.hostname}"')

    def render(self, generation: int = 0) -> bytes:
        lines: List[str] = []
        for number, family in enumerate(self.families):
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            for series, labels in enumerate(self._label_texts):
                lines.append(f"{family.name}{{{labels}}} {_value(family, number, series, generation)}")
        return ("\n".join(lines) + "\n").encode()

    def allocations(self) -> List[AllocatedDevice]:
        """Every MIG instance (or, without MIG, every GPU) held by a pod of its own."""
        devices = []
        for gpu in self.gpus:
            if not self.instances:
                devices.append(AllocatedDevice("training", f"trainer-{gpu.index}", "pytorch", "nvidia.com/gpu", gpu.uuid))
            for instance in self.instances:
                devices.append(AllocatedDevice(
                    "inference", f"llm-{gpu.index}-{instance}", "server", f"nvidia.com/mig-{MIG_PROFILE}",
                    f"MIG-{gpu.uuid}/{instance}/0"))
        return devices


def _value(family: Family, number: int, series: int, generation: int) -> str:
    # Counters grow; every fourth gauge is a fraction written "%f" (as 4.8.2 does), the rest integers.
    base = (number * 7919 + series * 104729) % 100000
    if family.kind == "counter":
        return str(base * 1000 + generation * (series + 1))
    if number % 4 == 0:
        return f"{(base % 1000) / 1000 + generation * 0.001:f}"
    return str(base % 2000 + generation % 97)


SIZES: dict = {
    "xlarge": Shape(gpus=32, instances_per_gpu=7, families=100),  # 25,600 series
    "large": Shape(gpus=8, instances_per_gpu=7, families=100),  # 6,400 series: 8 H100s, 7 MIG instances each
    "whole": Shape(gpus=8, instances_per_gpu=0, families=100),  # 800 series: 8 whole GPUs
    "typical": Shape(gpus=8, instances_per_gpu=0, families=40),
    "small": Shape(gpus=2, instances_per_gpu=2, families=10),
}


def describe(node: Node, body: bytes) -> str:
    mig = f" x {len(node.instances)} MIG instances" if node.instances else ""
    return (f"{len(node.gpus)} GPUs{mig} x {len(node.families)} families = {node.series} series, "
            f"{len(body) / 1e6:.2f} MB")

