"""NVML's per-process shares as a collector: --sharing.* and --energy.idle-policy, the share refresher, its section."""

from __future__ import annotations

import functools
import os
from typing import Mapping, Optional

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Collector, Flag, Hub, PagePart, SourceState
from exporter.collectors.roles import HOLDER_USE, POD_INDEX
from exporter.vendors.nvidia.collectors import DEMO_SETS_NVML
from exporter.vendors.nvidia.families import PROCESS_MODE
from exporter.vendors.nvidia.shares.energy import IDLE_POLICIES
from exporter.vendors.nvidia.shares.options import ProcessSharesOptions

SHARING_MODES = ("device", "process")


class ProcessSharesCollector(Collector):
    """--sharing.mode process: each holder's own share of a shared GPU, from NVML's processes and their cgroups."""

    name = "process_shares"
    switch = PROCESS_MODE
    section_sources = {"process_shares": "NVML"}
    takes = (POD_INDEX,)  # with the API off there is no pod index, and no share is served
    offers = (HOLDER_USE,)  # each holder's own SM and memory, for each pod's numbers
    flags = (
        Flag("--sharing.mode", "sharing_mode", SHARING_MODES, "device = values are device-level; process = also serve each holding container's own memory and SM share of its GPU, from NVML's per-process data (needs NVML, hostPID and the Kubernetes API).",
             "device"),
        Flag("--sharing.proc-root", "sharing_proc_root", "path", "Where the host's processes are seen, for --sharing.mode process: /proc with hostPID: true, or the host's /proc mounted elsewhere (e.g. /host/proc).",
             "/proc"),
        Flag("--energy.idle-policy", "energy_idle_policy", IDLE_POLICIES, "In --sharing.mode process, where a shared GPU's energy that no holder's SM activity accounts for goes: split = evenly between its holders; unattributed = to pod_gpu_unattributed_energy_joules_total{reason=\"idle\"}.",
             IDLE_POLICIES[0]),
    )
    refused = {
        "demo": dict.fromkeys(("sharing_mode", "sharing_proc_root"), DEMO_SETS_NVML),
        "mapping": dict.fromkeys(("sharing_mode", "sharing_proc_root", "energy_idle_policy"),
                                 "per-process shares are served, never printed by it"),
    }

    def __init__(self) -> None:
        self._shares = None
        self._uses = (None, None)  # (the reading, its holders' use): made once per refresh, read by every scrape

    def check(self, command: str, values: Mapping[str, object], origins: Mapping[str, str]) -> None:
        """A --sharing.proc-root that is no folder is a configuration mistake for the commands that read it
        (`mapping` never does, so a serving container's environment is not refused there)."""
        proc_root = values.get("sharing_proc_root", "/proc")
        if values.get("sharing_mode") == "process" and command != "mapping" and not os.path.isdir(proc_root):
            raise ConfigError(f"--sharing.proc-root: {proc_root} is not a directory (mount the host's /proc there "
                              "read-only, or run with hostPID: true and keep /proc)")

    def options(self, config) -> Optional[ProcessSharesOptions]:
        """Where the host's processes are seen, at the mapping's pace; None unless --sharing.mode process."""
        if config.sharing_mode != "process":
            return None
        return ProcessSharesOptions(config.sharing_proc_root, config.kubelet_refresh_interval_seconds,
                                    config.labels_style, config.energy_idle_policy)

    def enabled(self, config) -> bool:
        return self.options(config) is not None

    def prepare(self, hub: Hub) -> bool:
        hub.holder_use = self
        return True

    def holder_use(self):
        """(device, holder) → its own SM share and memory, from the reading its series are served from; None
        before a reading or once it is stale (no share served)."""
        shares = self._shares.reading() if self._shares is not None else None
        if shares is None:
            return None
        reading, uses = self._uses
        if reading is not shares:
            uses = holder_uses(shares)
            self._uses = (shares, uses)
        return uses

    def build(self, hub: Hub) -> None:
        from exporter.vendors.nvidia.shares.process_shares import ProcessShares, pod_index_source
        from exporter.vendors.nvidia.nvml.library import open_nvml

        options = self.options(hub.config)
        # The pod index another collector offered (None with the API off: no share is then served).
        self._shares = ProcessShares(options, functools.partial(open_nvml, hub.driver), hub.attribution.mapping_in_use,
                                     pod_index_source(hub.pod_index), label_limit=hub.label_limit)

    def start(self) -> None:
        self._shares.start()

    def stop(self) -> None:
        self._shares.stop(timeout_seconds=0.2)

    def sections(self):
        from exporter.exposition.sections import TextSection

        return (TextSection("process_shares", self._shares.text, self._shares.state),)

    def state(self) -> SourceState:
        up = self._shares.state().up
        return SourceState(self.name, up, None if up else "NVML did not answer the last refresh, or it is stale",
                           self._shares.age_seconds())

    def page_part(self) -> Optional[PagePart]:
        """The last refresh's shares while fresh: each holder's memory and SM share on the page."""
        shares = self._shares.reading()
        return None if shares is None else shares_page_part(shares)


def shares_page_part(shares) -> PagePart:
    """One reading's shares as the node page shows them: every GPU NVML read, each holder's memory and SM
    share of it, and what containers use of GPUs they do not hold."""
    from exporter.web.page_parts import BYTES, RATIO, WITH_UNHELD, Amount, Block, HolderFigure

    held = {(share.device, share.owner): share for share in shares.holders}
    used = tuple((use.device, use.owner, Amount(use.memory_bytes, BYTES), Amount(use.sm_ratio, RATIO))
                 for use in shares.unallocated)
    return PagePart(devices=frozenset(entry.device for entry in shares.devices), figures=(
        HolderFigure("memory", {holder: Amount(share.memory_bytes, BYTES) for holder, share in held.items()}),
        HolderFigure("SM", {holder: Amount(share.sm_ratio, RATIO) for holder, share in held.items()})),
        blocks=(Block("Used without being held", used, ("GPU", "container", "memory", "SM"), place=WITH_UNHELD),))


def holder_uses(shares) -> dict:
    """One reading's shares in the framework's terms: (device, holder) → HolderUse(SM ratio, memory bytes)."""
    from exporter.exposition.pod_numbers import HolderUse

    return {(share.device, share.owner): HolderUse(share.sm_ratio, share.memory_bytes) for share in shares.holders}
