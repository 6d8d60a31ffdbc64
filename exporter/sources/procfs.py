"""Which pod and container a host process belongs to, read from its /proc/<pid>/cgroup file."""

from __future__ import annotations

import os
import re
from typing import NamedTuple, Optional


class ProcessOwner(NamedTuple):
    """The kubelet's pod UID (dashed, as in metadata.uid) and the runtime's container ID ("" if none)."""

    pod_uid: str
    container_id: str


# A pod's cgroup, in the forms the kubelet creates:
#   cgroupfs driver: "pod<uid>" below kubepods[/burstable|/besteffort]
#   systemd driver:  "kubepods[-burstable|-besteffort]-pod<uid with _ for ->.slice", prefixed
#                    "kubelet-" when the kubelet runs under its own slice (kind)
_POD_CGROUPFS = re.compile(r"pod([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")
_POD_SYSTEMD = re.compile(
    r"(?:[a-z]+-)?kubepods(?:-[a-z]+)?-pod([0-9a-fA-F]{8}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{12})\.slice")
# A container's cgroup below its pod's: the bare ID (cgroupfs) or a runtime-named systemd scope —
# containerd "cri-containerd-<id>.scope", CRI-O "crio-<id>.scope", cri-dockerd "docker-<id>.scope".
# CRI-O's "crio-conmon-<id>.scope" is its monitor process, not the container, so it does not match.
_CONTAINER = re.compile(r"(?:(?:cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?")


def parse_cgroup(text: str) -> Optional[ProcessOwner]:
    """The owner named by a /proc/<pid>/cgroup file's text, or None for a process outside any pod.

    Lines are "<hierarchy>:<controllers>:<path>"; cgroup v2 has the one line "0::<path>", v1 one per
    hierarchy. Every line of a pod's process names the same pod, so the first one that names a pod
    wins. The pod segment is searched anywhere in the path: a kubelet run inside a container (kind,
    nested runtimes) puts its kubepods tree below a prefix such as "/kubelet.slice/…" or "/docker/<id>/".
    """
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        owner = _owner_in_path(path)
        if owner is not None:
            return owner
    return None


def _owner_in_path(path: str) -> Optional[ProcessOwner]:
    segments = [segment for segment in path.split("/") if segment]
    for position, segment in enumerate(segments):
        pod_uid = _pod_uid(segment)
        if pod_uid is None:
            continue
        following = segments[position + 1] if position + 1 < len(segments) else ""
        match = _CONTAINER.fullmatch(following)
        return ProcessOwner(pod_uid, match.group(1) if match else "")
    return None


def _pod_uid(segment: str) -> Optional[str]:
    match = _POD_SYSTEMD.fullmatch(segment)
    if match:
        return match.group(1).replace("_", "-").lower()
    match = _POD_CGROUPFS.fullmatch(segment)
    if match:
        return match.group(1).lower()
    return None


def read_process_owner(proc_root: str, pid: int) -> Optional[ProcessOwner]:
    """The owner of process `pid` as seen under `proc_root`, None for a process outside any pod.

    Raises OSError when the cgroup file cannot be read: the process has exited since NVML listed it,
    or this PID namespace does not show it (no hostPID and no host /proc mounted).
    """
    with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as file:
        return parse_cgroup(file.read(64 * 1024))  # a real file is a few hundred bytes; bound a strange one
