"""UTIL: the busy fraction (0-1) of the GPUs a holder holds, the number the recording rule
`namespace_pod:pod_gpu_utilization:ratio` gives an autoscaler, from the readings `top` already has (pure).

- Its own SM share (--sharing.mode process): its SM time over the GPUs it holds, so a pod using 0.22 of a
  GPU's time on half a GPU reads 0.44, and a holder that runs nothing reads 0.
- Elsewhere (--sharing.mode device, and MIG instances, where NVML reports no per-process utilisation): the
  mean utilisation of the devices it holds whole, DCGM_FI_DEV_GPU_UTIL/100 (DCGM_FI_PROF_GR_ENGINE_ACTIVE
  on a MIG instance, where GPU_UTIL is not reported). A shared device (several holders, or held through a
  replica or a fraction) reads another holder's work too: it never counts.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence, Tuple

# Device IDs that are a share of a GPU, not the GPU: time-slicing/MPS replicas (`GPU-<uuid>::N`), GKE's
# shared GPUs (`nvidia0/vgpu1`), HAMi's replicas (`GPU-<uuid>-<n>`: a UUID's last group has 12 hex digits).
_SHARE_OF_A_GPU = re.compile(r".*::\d+|.*/vgpu\d+|GPU-[0-9a-fA-F-]+-[0-9a-fA-F]{12}-\d+")


def is_share(device_id: str, resource: str) -> bool:
    """Whether an allocation is a share of its device (a replica or a fraction), from how the kubelet names it."""
    return bool(_SHARE_OF_A_GPU.fullmatch(device_id)) or resource.endswith(".shared")


def own_share(sm_ratio: Optional[float], gpus: Optional[float]) -> Optional[float]:
    """Its own SM time (GPUs' worth) over the GPUs it holds; None where it holds none or either is unknown."""
    if sm_ratio is None or not gpus:
        return None
    return sm_ratio / gpus


def whole_devices_busy(busy: Sequence[Optional[float]]) -> Optional[float]:
    """The mean of the utilisation of the devices held whole (None where one is not reported: left out)."""
    known = [value for value in busy if value is not None]
    return sum(known) / len(known) if known else None


def weighted(members: Iterable[Tuple[Optional[float], Optional[float]]]) -> Optional[float]:
    """A group's UTIL from its members' (utilization, gpus): their busy GPUs over their GPUs, never a sum."""
    known = [(value, gpus or 0.0) for value, gpus in members if value is not None]
    held = sum(gpus for _, gpus in known)
    return sum(value * gpus for value, gpus in known) / held if held else None
