"""The process shares' own settings, typed and frozen: what their collector builds from --sharing.* and --energy.idle-policy."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.vendors.nvidia.shares.energy import SPLIT


@dataclass(frozen=True)
class ProcessSharesOptions:
    """ProcessShares' settings, as its collector builds them once from the parsed flags."""

    proc_root: str  # --sharing.proc-root: where the host's processes are seen (a folder)
    interval_seconds: float  # --kubelet.refresh-interval: the shares follow the mapping's pace
    labels_style: str  # --labels.style
    idle_policy: str = SPLIT  # --energy.idle-policy
