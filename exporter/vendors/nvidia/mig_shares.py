"""What one NVIDIA device counts for: 1 per whole GPU, a MIG instance's memory share of its GPU, and the GPU a replica names."""

from __future__ import annotations

import re
from typing import Iterable, Optional

from exporter.core.hami import replica_gpu


# Memory slices out of 8 that each MIG profile holds, as NVIDIA's MIG user guide lists the profiles of
# the MIG-capable GPUs (A30 has 4 memory slices: its shares are written as eighths here too). A profile
# name alone tells its share, with one exception below: the share is what it costs its GPU, so this is
# memory slices, not compute slices (a 4g instance holds half the memory, not 4/7 of it).
_EIGHTHS = {
    # A100 40GB
    "1g.5gb": 1, "1g.5gb+me": 1, "2g.10gb": 2, "3g.20gb": 4, "4g.20gb": 4, "7g.40gb": 8,
    # A100 80GB, H100 80GB, H800
    "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8,
    # A30 24GB (4 memory slices)
    "1g.6gb": 2, "1g.6gb+me": 2, "2g.12gb": 4, "2g.12gb+me": 4, "4g.24gb": 8,
    # H100 NVL 94GB, GH200 96GB
    "1g.12gb": 1, "1g.12gb+me": 1, "1g.24gb": 2, "2g.24gb": 2, "3g.47gb": 4, "4g.47gb": 4, "7g.94gb": 8,
    "3g.48gb": 4, "4g.48gb": 4, "7g.96gb": 8,
    # H200 141GB
    "1g.18gb": 1, "1g.18gb+me": 1, "1g.35gb": 2, "2g.35gb": 2, "3g.71gb": 4, "4g.71gb": 4, "7g.141gb": 8,
    # B200 180GB
    "1g.23gb": 1, "1g.23gb+me": 1, "1g.45gb": 2, "2g.45gb": 2, "3g.90gb": 4, "4g.90gb": 4, "7g.180gb": 8,
}
# "1g.10gb" is one memory slice of an 80GB A100/H100 but two of a 40GB A100, where it is a late and
# rarely used profile: it counts as the 80GB one unless the node's other profiles are all 40GB ones.
_AMBIGUOUS = "1g.10gb"
_FAMILY_40GB = frozenset({"1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"})
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(.+)$")
_REPLICA = re.compile(r"^(.+?)(?:::\d+|/vgpu\d+)$")  # "GPU-…::3" (NVIDIA), "nvidia0/vgpu3" (GKE)
_GKE_MIG_ID = re.compile(r"^nvidia\d+/gi\d+$")


def mig_profile_of(resource: str) -> str:
    """The MIG profile a device-plugin resource name carries ("nvidia.com/mig-1g.10gb" → "1g.10gb"), else ""."""
    match = _MIG_RESOURCE.match(resource)
    return match.group(1) if match else ""


def mig_share(profile: str, node_profiles: Iterable[str] = ()) -> Optional[float]:
    """A MIG instance's share of its GPU's memory slices, from its profile; None when unknown."""
    eighths = _EIGHTHS.get(profile)
    if profile == _AMBIGUOUS:
        others = set(node_profiles) - {_AMBIGUOUS}
        eighths = 2 if others and others <= _FAMILY_40GB else 1
    return None if eighths is None else eighths / 8


def whole_device_share(resource: str, device_id: str, dra: bool, profile: str,
                       node_profiles: Iterable[str]) -> Optional[float]:
    """What one device counts for before it is split among replicas or holders: 1 for a whole GPU,
    the memory share for a MIG instance, None when it is a MIG instance of unknown profile."""
    profile = profile or ("" if dra else mig_profile_of(resource))
    if profile:
        return mig_share(profile, node_profiles)
    if device_id.startswith("MIG-") or _GKE_MIG_ID.match(device_id):
        return None  # a MIG instance whose resource name does not say its profile (single strategy, GKE)
    return 1.0


def replica_of(device_id: str) -> Optional[str]:
    """The GPU a replica's device ID names ("GPU-x::3" → "GPU-x", HAMi's "GPU-<uuid>-3" → "GPU-<uuid>"); None
    for other forms."""
    match = _REPLICA.match(device_id)
    return match.group(1) if match else replica_gpu(device_id)
