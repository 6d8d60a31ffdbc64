"""The node's AMD GPUs and partitions as sysfs shows them, read under a root folder (`/sys` on a node).

Read the way ROCm's own code reads them (ROCm/k8s-device-plugin internal/pkg/amdgpu/amdgpu.go: `GetAMDGPUs`,
`GetDevIdsFromTopology`; ROCm/k8s-gpu-dra-driver pkg/amdgpu/amdgpu.go: `GetAMDGPUs`, `GetTopologyInfo`):
- whole GPUs: module/amdgpu/drivers/pci:amdgpu/<PCI address>/ with current_compute_partition,
  current_memory_partition and drm/card<N>, drm/renderD<M>;
- further partitions: devices/platform/amdgpu_xcp_<N>/drm/renderD<M> (and card<N>; some kernels spell the folder
  amdgpu_xcp.<N>). The kernel makes such folders for every possible partition; only those whose render node KFD
  lists are in use;
- KFD topology: class/kfd/kfd/topology/nodes/<k>/properties, lines `drm_render_minor`, `location_id` (the PCI
  bus << 8 | device << 3 | function), `domain`.
Nothing here is guessed: a device whose files are missing or disagree is left out, and its IDs stay unresolved.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from exporter.vendors.amd.device_ids import partition_name

_GPU_FOLDERS = ("module", "amdgpu", "drivers", "pci:amdgpu")
_PLATFORM = ("devices", "platform")
_KFD_NODES = ("class", "kfd", "kfd", "topology", "nodes")
_PCI_FOLDER = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_XCP_FOLDER = re.compile(r"amdgpu_xcp[_.](\d+)")
_CARD = re.compile(r"card(\d+)")
_RENDER = re.compile(r"renderD(\d+)")
_KFD_PROPERTIES = ("drm_render_minor", "location_id", "domain")
_DECIMAL = re.compile(r"-?\d+")


@dataclass(frozen=True)
class AmdDevice:
    """One allocatable AMD device: a whole GPU, or one partition of a partitioned GPU."""

    device_id: str        # the device plugin's ID: the GPU's PCI address (whole GPU or its first partition), or amdgpu_xcp_<N>
    dra_name: str         # the DRA driver's device name gpu-<card>-<render>; "" without a card node
    pci_address: str      # this device's own address as KFD locates it: a partition's differs from its GPU's by function
    parent_address: str   # its GPU's PCI address (function 0)
    render_minor: int
    compute_partition: str  # the GPU's mode: spx, dpx, tpx, qpx, cpx; "" where sysfs does not say
    memory_partition: str   # nps1, nps2, nps4, nps8; ""


@dataclass(frozen=True)
class SysfsLayout:
    """Every AMD device found, by the device plugin's ID and by the DRA driver's name."""

    devices: Tuple[AmdDevice, ...] = ()
    by_device_id: Dict[str, AmdDevice] = field(default_factory=dict, compare=False)
    by_dra_name: Dict[str, AmdDevice] = field(default_factory=dict, compare=False)

    def parts_of(self, parent_address: str) -> int:
        """How many devices in use sysfs shows on the GPU at `parent_address`: 1 for a whole GPU, its partitions'
        count for a partitioned one."""
        return sum(1 for device in self.devices if device.parent_address == parent_address)


@dataclass(frozen=True)
class _KfdNode:
    render_minor: int
    address: str  # domain:bus:device.function from location_id


@dataclass(frozen=True)
class _DrmNodes:
    card: Optional[int]
    render: Optional[int]


def read_layout(root: str = "/sys") -> SysfsLayout:
    """The AMD devices under `root`: none without the amdgpu driver, whole GPUs only without KFD's topology.

    Read on every refresh of the identity service (every --kubelet.refresh-interval, scrapes or not): with plain
    string paths and only the three KFD properties used, since pathlib objects and a regular expression on every
    properties line made it most of an idle AMD node's CPU (13 ms a read on 64 partitions)."""
    kfd = _kfd_nodes(os.path.join(root, *_KFD_NODES))
    gpus = list(_whole_gpus(os.path.join(root, *_GPU_FOLDERS), kfd))
    by_parent = {gpu.parent_address: gpu for gpu in gpus}
    devices = gpus + list(_partitions(os.path.join(root, *_PLATFORM), kfd, by_parent))
    # Two devices with one DRA name would make either a guess: neither is named.
    names = [device.dra_name for device in devices if device.dra_name]
    by_dra = {d.dra_name: d for d in devices if d.dra_name and names.count(d.dra_name) == 1}
    return SysfsLayout(tuple(devices), {d.device_id: d for d in devices}, by_dra)


def _whole_gpus(folder: str, kfd: Dict[int, _KfdNode]) -> Iterator[AmdDevice]:
    for name in _listed(folder):
        if not _PCI_FOLDER.fullmatch(name):
            continue
        address, path = name.lower(), os.path.join(folder, name)
        drm = _drm_nodes(os.path.join(path, "drm"))
        if drm.render is None:
            continue
        node = kfd.get(drm.render)
        # KFD's own address for the first partition is the GPU's: a disagreement is not ours to settle.
        if node is not None and node.address != address:
            continue
        yield AmdDevice(address, _dra_name(drm), address, address, drm.render,
                        _read_word(os.path.join(path, "current_compute_partition")),
                        _read_word(os.path.join(path, "current_memory_partition")))


def _partitions(folder: str, kfd: Dict[int, _KfdNode], gpus: Dict[str, AmdDevice]) -> List[AmdDevice]:
    found: List[AmdDevice] = []
    for name in _listed(folder):
        match = _XCP_FOLDER.fullmatch(name)
        if not match:
            continue
        drm = _drm_nodes(os.path.join(folder, name, "drm"))
        node = kfd.get(drm.render) if drm.render is not None else None
        if node is None:
            continue  # a partition not in use: the device plugin skips it too
        parent = gpus.get(_function_zero(node.address))
        if parent is None or node.address == parent.pci_address:
            continue  # no GPU of its own to belong to, or KFD places it on its GPU's first partition
        found.append(AmdDevice(partition_name(match.group(1)), _dra_name(drm), node.address, parent.parent_address, drm.render,
                               parent.compute_partition, parent.memory_partition))
    # amdgpu_xcp_3 and amdgpu_xcp.3 side by side would be one ID for two folders: neither is taken.
    ids = [device.device_id for device in found]
    return [device for device in found if ids.count(device.device_id) == 1]


def _kfd_nodes(folder: str) -> Dict[int, _KfdNode]:
    """Render minor → KFD's node for it; CPU nodes (minor 0) and minors listed twice are left out."""
    nodes: Dict[int, _KfdNode] = {}
    doubled = set()
    for name in _listed(folder):
        properties = _read_properties(os.path.join(folder, name, "properties"))
        minor, location, domain = (properties.get(k) for k in _KFD_PROPERTIES)
        if minor is None or location is None or domain is None or minor <= 0:
            continue
        if minor in nodes:
            doubled.add(minor)
        nodes[minor] = _KfdNode(minor, _address(domain, location))
    return {minor: node for minor, node in nodes.items() if minor not in doubled}


def _address(domain: int, location_id: int) -> str:
    """location_id is the PCI routing ID: bus in bits 8-15, device in 3-7, function in 0-2."""
    return f"{domain:04x}:{location_id >> 8 & 0xff:02x}:{location_id >> 3 & 0x1f:02x}.{location_id & 0x7}"


def _function_zero(address: str) -> str:
    return address.rsplit(".", 1)[0] + ".0"


def _drm_nodes(folder: str) -> _DrmNodes:
    cards, renders = [], []
    for name in _listed(folder):
        card, render = _CARD.fullmatch(name), _RENDER.fullmatch(name)
        if card:
            cards.append(int(card.group(1)))
        if render:
            renders.append(int(render.group(1)))
    return _DrmNodes(cards[0] if len(cards) == 1 else None, renders[0] if len(renders) == 1 else None)


def _dra_name(drm: _DrmNodes) -> str:
    return f"gpu-{drm.card}-{drm.render}" if drm.card is not None and drm.render is not None else ""


def _listed(folder: str) -> List[str]:
    """The names in a folder, sorted; none when it cannot be listed."""
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _read_word(path: str) -> str:
    return _read_text(path).strip().lower()


def _read_text(path: str) -> str:
    """A small sysfs file's text, "" when it cannot be read; unbuffered bytes (a page at most), decoded after."""
    try:
        with open(path, "rb", buffering=0) as file:
            return file.read().decode("ascii", errors="replace")
    except OSError:
        return ""


def _read_properties(path: str) -> Dict[str, int]:
    """The properties this module reads (_KFD_PROPERTIES) from a KFD properties file: one `name value` per line,
    values in decimal, the first line of a name counting."""
    found: Dict[str, int] = {}
    for line in _read_text(path).splitlines():
        name, space, value = line.strip().partition(" ")
        if name in _KFD_PROPERTIES and name not in found and space and _DECIMAL.fullmatch(value):
            found[name] = int(value)
    return found
