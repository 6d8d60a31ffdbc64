"""UTIL: the busy fraction (0-1) of the GPUs a holder holds, the number the recording rule
`namespace_pod:pod_gpu_utilization:ratio` gives an autoscaler, from the readings `top` already has (pure).

It is the pod's number (the rule's is per pod), shown on each of its containers' rows:
- Its own SM share (--sharing.mode process): the pod's SM time over the GPUs it holds (at most 1), so a pod
  using 0.22 of a GPU's time on half a GPU reads 0.44, and a holder that runs nothing reads 0.
- Elsewhere (--sharing.mode device, and MIG instances, where NVML reports no per-process utilisation): the
  mean utilisation of the devices it holds, DCGM_FI_DEV_GPU_UTIL/100 (DCGM_FI_PROF_GR_ENGINE_ACTIVE on a
  MIG instance, where GPU_UTIL is not reported), each device once. A pod holding a shared device (several
  holders, or held through a replica) has none: the device's utilisation is everyone's, and another
  holder's work must never scale it.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence, Tuple

# Device IDs that are a share of a GPU, not the GPU, as the rule matches them: time-slicing/MPS replicas
# (`GPU-<uuid>::N`), GKE's shared GPUs (`nvidia0/vgpu1`), HAMi's replicas (`GPU-<uuid>-<n>`).
_SHARE_OF_A_GPU = re.compile(r".+::[0-9]+|.+/vgpu[0-9]+|GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                             r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}-[0-9]+")
# DCGM's "blank" sentinels (huge values for a field it cannot read) are no percentage.
_MAX_PERCENT = 100.0


def is_share(device_id: str) -> bool:
    """Whether an allocation is a replica of its device, from how the kubelet names it."""
    return bool(_SHARE_OF_A_GPU.fullmatch(device_id))


def own_share(sm_ratio: Optional[float], gpus: Optional[float]) -> Optional[float]:
    """Its own SM time (GPUs' worth) over the GPUs it holds, at most 1 (a pod using more than its share of
    a shared GPU is fully busy); None where it holds none or either is unknown."""
    if sm_ratio is None or not gpus or gpus <= 0:
        return None
    return min(sm_ratio / gpus, 1.0)


def device_busy(gpu_util_percent: Optional[float], engine_active: Optional[float]) -> Optional[float]:
    """One device's utilisation: GPU_UTIL/100 where reported (a whole GPU), else GR_ENGINE_ACTIVE (a MIG
    instance; a GPU without GPU_UTIL)."""
    if gpu_util_percent is not None and 0.0 <= gpu_util_percent <= _MAX_PERCENT:
        return gpu_util_percent / 100.0
    return engine_active


def whole_devices_busy(busy: Sequence[Optional[float]]) -> Optional[float]:
    """The mean utilisation of the devices held whole (one not reported is left out; none: None)."""
    known = [value for value in busy if value is not None]
    return sum(known) / len(known) if known else None


def weighted(members: Iterable[Tuple[Optional[float], Optional[float]]]) -> Optional[float]:
    """A group's UTIL from its members' (utilization, gpus): their busy GPUs over their GPUs, never a sum."""
    known = [(value, gpus or 0.0) for value, gpus in members if value is not None]
    held = sum(gpus for _, gpus in known)
    return sum(value * gpus for value, gpus in known) / held if held else None
