"""Wiring what reads NVML from a Config: the per-process shares, the XID event counters and the MIG resolver.

Each takes `nvml`, a binding to use instead of pynvml: the demo passes its simulation; a real node, None.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Optional

from exporter.config import Config
from exporter.core.attribution import Attribution
from exporter.exposition.label_limit import LabelLimit

if TYPE_CHECKING:  # imported by process_shares when --sharing.mode process asks for it
    from exporter.shares.process_shares import FreshPods


def process_shares(config: Config, attribution: Attribution, pods: Optional[FreshPods], label_limit: LabelLimit,
                   nvml: Any = None):
    """The per-process share refresher for --sharing.mode process, else None. `pods`: the Kubernetes
    source's pod index (None with the API off)."""
    if config.sharing_mode != "process":
        return None
    from exporter.shares.process_shares import ProcessShares, ProcessSharesOptions, pod_index_source
    from exporter.sources.nvml.library import open_nvml

    options = ProcessSharesOptions(config.sharing_proc_root, config.kubelet_refresh_interval_seconds,
                                   config.labels_style, config.energy_idle_policy)
    return ProcessShares(options, functools.partial(open_nvml, nvml), attribution.mapping_in_use,
                         pod_index_source(pods), label_limit=label_limit)


def xid_events(config: Config, attribution: Attribution, label_limit: LabelLimit, nvml: Any = None):
    """NVML's XID events counted (--health.xid-events; auto: in --sharing.mode process), else None. `nvml`:
    the binding to use instead of pynvml (the demo's simulation)."""
    if config.health_xid_events == "off" or (config.health_xid_events == "auto" and config.sharing_mode != "process"):
        return None
    from exporter.shares.xid_events import XidEvents
    from exporter.sources.nvml.library import open_nvml

    # The trusted mapping the shares attribute by: once the kubelet's has aged out it is None, and no
    # holder is then taken to have left (an empty mapping would read as every holder gone).
    return XidEvents(functools.partial(open_nvml, nvml), attribution.mapping_in_use, config.labels_style,
                     label_limit)


def mig_resolver(nvml: Any = None):
    """Resolves MIG-<uuid> device IDs through NVML (`nvml`, else pynvml), opened (and its outcome logged) at
    the first such ID."""
    from exporter.sources.nvml.library import LazyMigResolver

    return LazyMigResolver(nvml)
