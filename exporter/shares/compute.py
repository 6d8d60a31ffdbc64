"""Pure: each holding container's own share of a GPU or MIG instance, from NVML's processes, and its series."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List
from typing import Mapping as MappingType
from typing import NamedTuple, Optional, Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import Mapping
from exporter.exposition.labels import gpu_label_pairs, render_owner_labels
from exporter.exposition.text import LabelPairs, family_header, render_label_pairs
from exporter.sources.nvml.processes import DeviceProcesses
from exporter.sources.procfs import ProcessOwner

MEMORY = "pod_gpu_container_memory_used_bytes"
SM_UTILIZATION = "pod_gpu_container_sm_utilization_ratio"
UNATTRIBUTED = "pod_gpu_exporter_unattributed_processes"

_HELP = {
    MEMORY: "Framebuffer memory used on this GPU or MIG instance by the container's own processes (NVML per-process data).",
    SM_UTILIZATION: "SM utilisation (0-1) of this GPU by the container's own processes over the last sample window (NVML per-process data).",
    UNATTRIBUTED: "Processes on this GPU or MIG instance that belong to none of its holders (host processes, other pods, unseen PIDs).",
}


class PodContainers(NamedTuple):
    """One pod's names and its containers by runtime ID: what tells a process's cgroup owner apart."""

    namespace: str
    pod: str
    containers: Dict[str, str]  # container ID without the runtime prefix ("containerd://") → container name


PodIndex = MappingType[str, PodContainers]  # pod UID → PodContainers


class HolderShare(NamedTuple):
    device: GpuIdentity
    owner: Owner
    memory_bytes: int
    sm_ratio: Optional[float]  # None on devices where NVML reports no per-process utilisation


class Shares(NamedTuple):
    holders: Tuple[HolderShare, ...]
    unattributed: Tuple[Tuple[GpuIdentity, int], ...]  # per device read, 0 included


def owner_of_process(owner: Optional[ProcessOwner], pods: PodIndex) -> Optional[Owner]:
    """namespace/pod/container of a process's cgroup owner, or None when the API does not know it."""
    if owner is None or not owner.container_id:
        return None
    pod = pods.get(owner.pod_uid)
    if pod is None:
        return None
    container = pod.containers.get(owner.container_id)
    return None if container is None else Owner(pod.namespace, pod.pod, container)


def compute_shares(devices: Iterable[DeviceProcesses], mapping: Mapping,
                   process_owners: MappingType[int, Optional[ProcessOwner]], pods: PodIndex) -> Shares:
    """One HolderShare per holder of every device read, and per device the processes given to none.

    `process_owners` holds what each PID's cgroup says (None: outside any pod); a PID missing from it
    could not be read. A process counts for a holder only when its pod UID and container ID name
    exactly that holder: a host process, another pod's, or an unreadable one is never given away.
    """
    holders: List[HolderShare] = []
    unattributed: List[Tuple[GpuIdentity, int]] = []
    for entry in devices:
        owners = mapping.owners_of(entry.device)
        memory = dict.fromkeys(owners, 0)
        sm = dict.fromkeys(owners, 0.0)
        strangers = 0
        for pid, used in entry.memory_bytes.items():
            owner = owner_of_process(process_owners.get(pid), pods)
            if owner not in memory:
                strangers += 1
                continue
            memory[owner] += used
            if entry.sm_ratio is not None:
                sm[owner] += entry.sm_ratio.get(pid, 0.0)
        for owner in owners:
            # Processes' SM shares add up; rounding in the driver can push a sum a little over 1.
            ratio = None if entry.sm_ratio is None else min(sm[owner], 1.0)
            holders.append(HolderShare(entry.device, owner, memory[owner], ratio))
        unattributed.append((entry.device, strangers))
    return Shares(tuple(holders), tuple(unattributed))


def pod_index(pods: Iterable[Tuple[Tuple[str, str], Any]]) -> Dict[str, PodContainers]:
    """pod UID → PodContainers from the Kubernetes API cache's ((namespace, name), pod) items; a pod
    there has `uid` and `containers` as (name, "<runtime>://<id>") pairs."""
    index: Dict[str, PodContainers] = {}
    for (namespace, name), pod in pods:
        # containerStatuses[].containerID is "containerd://<id>", "cri-o://<id>" or "docker://<id>";
        # the cgroup path names the bare ID.
        containers = {container_id.partition("://")[2] or container_id: container
                      for container, container_id in pod.containers}
        index[pod.uid] = PodContainers(namespace, name, containers)
    return index


def render_shares(shares: Shares, style: str,
                  extra_labels: Optional[MappingType[Tuple[str, str], LabelPairs]] = None) -> str:
    """The share series and the unattributed gauge as exposition text (empty when nothing was read).

    `extra_labels`: (namespace, pod) → the Kubernetes API's extra labels (Mapping.extra_labels),
    written after the owner labels as on pod_gpu_allocation_info."""
    extra_labels = extra_labels or {}
    memory = [(share, str(share.memory_bytes)) for share in shares.holders]
    sm = [(share, _ratio(share.sm_ratio)) for share in shares.holders if share.sm_ratio is not None]
    lines: List[str] = []
    for name, rows in ((MEMORY, memory), (SM_UTILIZATION, sm)):
        if rows:
            lines.append(family_header(name, _HELP[name]))
            lines += [f"{name}{{{_holder_labels(share, style, extra_labels)}}} {value}\n" for share, value in rows]
    if shares.unattributed:
        lines.append(family_header(UNATTRIBUTED, _HELP[UNATTRIBUTED]))
        lines += [f"{UNATTRIBUTED}{{{render_label_pairs(gpu_label_pairs(device))}}} {count}\n"
                  for device, count in shares.unattributed]
    return "".join(lines)


def _holder_labels(share: HolderShare, style: str, extra_labels: MappingType[Tuple[str, str], LabelPairs]) -> str:
    """The device's UUID, gpu [, GPU_I_ID], then the holder's owner labels and its pod's extra labels."""
    owner = share.owner
    extra = extra_labels.get((owner.namespace, owner.pod), ())
    return render_label_pairs(gpu_label_pairs(share.device)) + "," + render_owner_labels(owner, style, extra)


def _ratio(value: Optional[float]) -> str:
    return format(round(value or 0.0, 4), "g")
